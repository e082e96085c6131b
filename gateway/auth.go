package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/txnmap"
)

// Client is an authenticated worker identity: a client of the config file
// (fileconfig.Client: its token hash, certificate name, allow patterns
// and act_for) with its token hash decoded by NewAuthenticator.
type Client struct {
	fileconfig.Client
	hash []byte
}

// Authenticator checks bearer tokens against configured clients.
type Authenticator struct {
	clients []Client
}

// NewAuthenticator validates the clients' hashes and patterns. It refuses
// a config that could be read two ways (FM44): a name, a token hash or a
// certificate_cn of two clients (a shared hash gave the token the last
// client's rights, a shared name one in-flight cap and one owner binding
// to two clients), an allow pattern Match cannot read (it would match
// nothing, silently), and an act_for naming no client.
func NewAuthenticator(clients []fileconfig.Client) (*Authenticator, error) {
	out := make([]Client, len(clients))
	names, hashes, cns := map[string]bool{}, map[string]string{}, map[string]bool{}
	for i, fc := range clients {
		c := Client{Client: fc}
		if c.Name == "" {
			return nil, fmt.Errorf("client %d: empty name", i)
		}
		if names[c.Name] {
			return nil, fmt.Errorf("client %q is named twice: each client needs its own name (its in-flight cap and the leases bound to it are per name)", c.Name)
		}
		names[c.Name] = true
		if c.TokenSHA256 != "" || c.CertificateCN == "" {
			h, err := hex.DecodeString(c.TokenSHA256)
			if err != nil || len(h) != sha256.Size {
				return nil, fmt.Errorf("client %q: token_sha256 must be 64 hex digits (or give certificate_cn only)", c.Name)
			}
			// Keyed by the bytes, so that upper- and lower-case hex of one
			// hash are one token.
			if other, ok := hashes[string(h)]; ok {
				return nil, fmt.Errorf("client %q: token_sha256 is client %q's too: one token must name one client", c.Name, other)
			}
			hashes[string(h)] = c.Name
			c.hash = h
		}
		if c.CertificateCN != "" {
			if cns[c.CertificateCN] {
				return nil, fmt.Errorf("client %q: certificate_cn %q names another client too", c.Name, c.CertificateCN)
			}
			cns[c.CertificateCN] = true
		}
		for _, p := range c.Allow {
			if err := txnmap.ValidatePattern(p); err != nil {
				return nil, fmt.Errorf("client %q: allow pattern %q: %w", c.Name, p, err)
			}
		}
		if err := checkKind(c.Client); err != nil {
			return nil, err
		}
		out[i] = c
	}
	if err := checkActFor(out); err != nil {
		return nil, err
	}
	return &Authenticator{clients: out}, nil
}

// checkActFor refuses an act_for entry that names no client: a typo must
// not pass silently as a grant to nobody.
func checkActFor(clients []Client) error {
	names := map[string]bool{}
	for _, c := range clients {
		names[c.Name] = true
	}
	for _, c := range clients {
		for _, n := range c.ActFor {
			if n != "*" && !names[n] {
				return fmt.Errorf("client %q: act_for names %q, which is no client (\"*\" means every client)", c.Name, n)
			}
		}
	}
	return nil
}

// checkKind refuses a kind that is neither fenced nor direct (a typo
// must not make an old binary count as fenced), and a Kafka principal on a
// fenced client (only direct writers' ACLs are removed at enforce).
func checkKind(c fileconfig.Client) error {
	switch c.Kind {
	case "", fileconfig.KindFenced:
		if c.KafkaPrincipal != "" {
			return fmt.Errorf("client %q: kafka_principal is for kind: direct (the principal whose Write ACLs enforce removes)", c.Name)
		}
	case fileconfig.KindDirect:
	default:
		return fmt.Errorf("client %q: kind %q is neither %q nor %q", c.Name, c.Kind, fileconfig.KindFenced, fileconfig.KindDirect)
	}
	return nil
}

// DirectClients names the clients whose kind is direct.
func (a *Authenticator) DirectClients() []string {
	var out []string
	for _, c := range a.clients {
		if c.IsDirect() {
			out = append(out, c.Name)
		}
	}
	return out
}

// byName returns the client named name, or nil.
func (a *Authenticator) byName(name string) *Client {
	for i := range a.clients {
		if a.clients[i].Name == name {
			return &a.clients[i]
		}
	}
	return nil
}

// HashToken returns the hex SHA-256 of a bearer token, as stored in config.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// authenticateRequest returns the client of a request: by its bearer token
// when it has an Authorization header, else by the common name of its
// verified TLS client certificate.
func (a *Authenticator) authenticateRequest(r *http.Request) (*Client, *Error) {
	if h := r.Header.Get("Authorization"); h != "" || r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return a.authenticate(h)
	}
	// VerifiedChains is set only when the server verified the certificate
	// against --tls-client-ca: an unverified certificate names no one.
	leaf := r.TLS.VerifiedChains[0][0]
	// A subject with two common names is read differently by different
	// code: Go keeps the last, OpenSSL-based CA policies often check the
	// first. Such a certificate names no one (FM44).
	if n := commonNames(leaf); n > 1 {
		return nil, errorf(CodeUnauthorized, "the client certificate's subject has %d common names; a certificate names a client by exactly one", n)
	}
	cn := leaf.Subject.CommonName
	for i := range a.clients {
		if cn != "" && a.clients[i].CertificateCN == cn {
			return &a.clients[i], nil
		}
	}
	return nil, errorf(CodeUnauthorized, "no bearer token, and no client has certificate_cn %q", cn)
}

// oidCommonName is the X.520 commonName attribute type.
var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

// commonNames counts the common-name attributes of c's subject
// (Subject.Names holds every attribute parsed, in order).
func commonNames(c *x509.Certificate) int {
	n := 0
	for _, a := range c.Subject.Names {
		if a.Type.Equal(oidCommonName) {
			n++
		}
	}
	return n
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
		if a.clients[i].hash != nil && subtle.ConstantTimeCompare(sum[:], a.clients[i].hash) == 1 {
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

// actsFor says whether c may act as the owner of a generation granted to
// client: c itself, a client its ActFor names, or a generation granted
// before grants recorded their client (""). A nil c acts for no one bound.
func (c *Client) actsFor(client string) bool {
	if client == "" {
		return true
	}
	if c == nil {
		return false
	}
	return client == c.Name || slices.Contains(c.ActFor, client) || slices.Contains(c.ActFor, "*")
}

// mayActFor refuses c acting as the owner of a generation granted to
// client (403 forbidden, FM38).
func (c *Client) mayActFor(client, lease string) *Error {
	if c.actsFor(client) {
		return nil
	}
	return errorf(CodeForbidden, "lease %q was acquired by another client; this client may not act as its owner (act_for)", lease)
}

// name is the client's name, "" for none (a caller inside the process).
func (c *Client) name() string {
	if c == nil {
		return ""
	}
	return c.Name
}

// gateFor is the route pattern whose rollout state must allow caller on
// lease name: the lease's route for a direct client, "" for a fenced one
// or a caller inside the process (FM21).
func (g *Gateway) gateFor(caller *Client, name string) string {
	if caller == nil || !caller.IsDirect() {
		return ""
	}
	p, _ := g.router.PatternOf(name)
	return p
}
