package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/txnmap"
)

// Client is a worker identity: a bearer token (stored as its SHA-256) and
// the lease-name patterns it may take and write.
type Client struct {
	Name        string   `yaml:"name"`
	TokenSHA256 string   `yaml:"token_sha256"`
	Allow       []string `yaml:"allow"`
	hash        []byte
}

// Authenticator checks bearer tokens against configured clients.
type Authenticator struct {
	clients []Client
}

// NewAuthenticator validates the clients' hashes and patterns.
func NewAuthenticator(clients []Client) (*Authenticator, error) {
	out := make([]Client, len(clients))
	for i, c := range clients {
		h, err := hex.DecodeString(c.TokenSHA256)
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("client %q: token_sha256 must be 64 hex digits", c.Name)
		}
		if c.Name == "" {
			return nil, fmt.Errorf("client %d: empty name", i)
		}
		c.hash = h
		out[i] = c
	}
	return &Authenticator{clients: out}, nil
}

// HashToken returns the hex SHA-256 of a bearer token, as stored in config.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// authenticate returns the client of an Authorization header value.
func (a *Authenticator) authenticate(header string) (*Client, *Error) {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || token == "" {
		return nil, errorf(CodeUnauthorized, "missing bearer token")
	}
	sum := sha256.Sum256([]byte(token))
	var found *Client
	for i := range a.clients {
		// Compare every client in constant time; no early exit on a match.
		if subtle.ConstantTimeCompare(sum[:], a.clients[i].hash) == 1 {
			found = &a.clients[i]
		}
	}
	if found == nil {
		return nil, errorf(CodeUnauthorized, "unknown bearer token")
	}
	return found, nil
}

// authorize says whether c may take and write lease name.
func (c *Client) authorize(name string) *Error {
	for _, p := range c.Allow {
		if txnmap.Match(p, name) {
			return nil
		}
	}
	return errorf(CodeForbidden, "client %q may not use lease %q", c.Name, name)
}
