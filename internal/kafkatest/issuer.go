package kafkatest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Issuer is a small OAuth 2.0 identity provider for tests: a token
// endpoint for the client credentials grant that issues short-lived RS256
// JWTs, and the JWKS document with the key that signs them, which the
// secured broker's JWT validator fetches. It lives as long as the test
// binary (the shared broker depends on it).
type Issuer struct {
	url   string
	key   *rsa.PrivateKey // in the JWKS
	rogue *rsa.PrivateKey // not in the JWKS: its tokens are rejected
	mu    sync.Mutex
	reg   map[string]IssuerClient
	// Issued counts the tokens issued, per client id.
	issued sync.Map // string -> *atomic.Int64
}

// IssuerClient is one registered client.
type IssuerClient struct {
	Secret string
	// Subject is the token's sub claim: the broker's principal name.
	Subject string
	// Lifetime of each token (default one hour).
	Lifetime time.Duration
	// Rogue signs the tokens with a key the JWKS does not hold: the
	// issuer answers, the broker refuses them.
	Rogue bool
}

// NewIssuer starts an issuer on a loopback port.
func NewIssuer() (*Issuer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	rogue, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	iss := &Issuer{url: "http://" + ln.Addr().String(), key: key, rogue: rogue, reg: map[string]IssuerClient{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /jwks", iss.jwks)
	mux.HandleFunc("POST /token", iss.token)
	go func() { _ = http.Serve(ln, mux) }()
	return iss, nil
}

// JWKSURL is the JWKS document's URL.
func (i *Issuer) JWKSURL() string { return i.url + "/jwks" }

// TokenURL is the token endpoint's URL.
func (i *Issuer) TokenURL() string { return i.url + "/token" }

// Register adds (or replaces) client id.
func (i *Issuer) Register(id string, c IssuerClient) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.reg[id] = c
}

// Issued returns how many tokens client id was given.
func (i *Issuer) Issued(id string) int64 {
	n, ok := i.issued.Load(id)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

func (i *Issuer) jwks(w http.ResponseWriter, _ *http.Request) {
	pub := i.key.PublicKey
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": "k1",
		"n": b64(pub.N.Bytes()), "e": b64(big.NewInt(int64(pub.E)).Bytes()),
	}}})
}

func (i *Issuer) token(w http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if !ok {
		_ = r.ParseForm()
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	i.mu.Lock()
	c, known := i.reg[id]
	i.mu.Unlock()
	if !known || c.Secret != secret {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
		return
	}
	life := c.Lifetime
	if life == 0 {
		life = time.Hour
	}
	tok, err := i.sign(c, life)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	n, _ := i.issued.LoadOrStore(id, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer",
		"expires_in": int64(life / time.Second)})
}

// sign makes an RS256 JWT for c (RFC 7519, RFC 7515).
func (i *Issuer) sign(c IssuerClient, life time.Duration) (string, error) {
	key, kid := i.key, "k1"
	if c.Rogue {
		key, kid = i.rogue, "k1" // the JWKS's kid, the wrong key: the signature fails
	}
	now := time.Now()
	head, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": kid})
	claims, _ := json.Marshal(map[string]any{"sub": c.Subject, "iss": i.url, "aud": OAuthAudience,
		"iat": now.Unix(), "nbf": now.Unix() - 1, "exp": now.Add(life).Unix(), "scope": "kafka"})
	signing := b64(head) + "." + b64(claims)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", err
	}
	return signing + "." + b64(sig), nil
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
