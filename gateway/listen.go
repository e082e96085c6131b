package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"
)

// ServerConfig bounds what clients may hold of an HTTP listener and says
// whether it speaks TLS. Zero fields take the defaults noted (also
// DefaultServerConfig); docs/security.md explains each.
type ServerConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (default
	// 30s): a client that trickles its body is cut off.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from the end of the headers to the end
	// of the reply (default 2m, above every handler's own deadline).
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle that long (default 60s).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request headers (default 64 KiB).
	MaxHeaderBytes int
	// MaxInFlight bounds the API requests served at once (default 1024);
	// MaxInFlightPerClient bounds those of one authenticated client
	// (default 256). Beyond either: 429 too_many_requests with Retry-After.
	MaxInFlight          int
	MaxInFlightPerClient int
	// MaxBodyBytesInFlight bounds the bytes of request bodies held at once,
	// across all clients (default DefaultMaxBodyBytesInFlight, 64 MiB;
	// at least Limits.MaxRequestBytes, or a largest body is never
	// admitted). A request takes its declared length before its body is
	// read, and more as a body of no declared length grows; beyond the
	// budget: 429 too_many_requests with Retry-After, nothing done. What a
	// request holds is a small multiple of its body (the body, the
	// decoder's copy, the decoded records; docs/security.md), so this
	// bounds the memory that bodies in flight can take (FM39).
	MaxBodyBytesInFlight int64
	// TLSCertFile and TLSKeyFile turn on HTTPS; both are re-read when
	// either file changes, without a restart. TLSClientCAFile, when set,
	// requires every client to present a certificate signed by one of its
	// CAs (mutual TLS).
	TLSCertFile     string
	TLSKeyFile      string
	TLSClientCAFile string
}

// DefaultServerConfig returns the defaults of ServerConfig.
func DefaultServerConfig() ServerConfig {
	var c ServerConfig
	c.fill()
	return c
}

func (c *ServerConfig) fill() {
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 2 * time.Minute
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 60 * time.Second
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 1024
	}
	if c.MaxInFlightPerClient == 0 {
		c.MaxInFlightPerClient = 256
	}
	if c.MaxBodyBytesInFlight == 0 {
		c.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
}

// DefaultMaxBodyBytesInFlight is the default of
// ServerConfig.MaxBodyBytesInFlight: four bodies of the default
// --max-request-bytes, or about 450 batches of 100 x 1 KiB in JSON.
const DefaultMaxBodyBytesInFlight = 64 << 20

// AdvertiseURL checks u, the URL other replicas send this listener's
// clients to (421 holder_url), and returns it, defaulting to
// <scheme>://<listen> when empty. A listener that serves HTTPS must
// advertise https://: clients following a 421 would send their bearer
// tokens in clear, and the SDK refuses to follow one from https to http
// (FM42). A plain listener may advertise https:// (a TLS proxy in front).
func (c ServerConfig) AdvertiseURL(u, listen string) (string, error) {
	tls := c.TLSCertFile != ""
	if u == "" {
		if tls {
			return "https://" + listen, nil
		}
		return "http://" + listen, nil
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return "", fmt.Errorf("--advertise-url %q is not an http:// or https:// URL with a host", u)
	}
	if tls && pu.Scheme != "https" {
		return "", fmt.Errorf("--advertise-url %q is plain HTTP but this listener serves HTTPS (--tls-cert): "+
			"clients sent there would carry their bearer tokens in clear, and the SDK refuses to follow it; advertise https://%s", u, pu.Host)
	}
	return u, nil
}

// HTTPServer returns an http.Server for h with the timeouts, header limit
// and TLS of c. The caller serves it with ServeTLS when TLSConfig is set
// (the certificate comes from TLSConfig, so the file arguments are empty).
func (c ServerConfig) HTTPServer(h http.Handler, log *slog.Logger) (*http.Server, error) {
	c.fill()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: c.ReadHeaderTimeout, ReadTimeout: c.ReadTimeout,
		WriteTimeout: c.WriteTimeout, IdleTimeout: c.IdleTimeout, MaxHeaderBytes: c.MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	tc, err := c.TLSConfig(log)
	if err != nil {
		return nil, err
	}
	srv.TLSConfig = tc
	return srv, nil
}

// TLSConfig returns the server TLS configuration, nil without a
// certificate. The key pair is loaded now (a bad pair fails the start) and
// re-read on change.
func (c ServerConfig) TLSConfig(log *slog.Logger) (*tls.Config, error) {
	if c.TLSCertFile == "" && c.TLSKeyFile == "" {
		if c.TLSClientCAFile != "" {
			return nil, errors.New("a TLS client CA needs --tls-cert and --tls-key")
		}
		return nil, nil
	}
	if c.TLSCertFile == "" || c.TLSKeyFile == "" {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	r := &certReloader{certFile: c.TLSCertFile, keyFile: c.TLSKeyFile, log: log}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	if c.TLSClientCAFile != "" {
		pem, err := os.ReadFile(c.TLSClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("TLS client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS client CA %s holds no PEM certificate", c.TLSClientCAFile)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// certReloader serves the key pair of two files and reloads it when
// either file is replaced or its modification time or size changes (a renewed certificate
// written in place or renamed over the old one). A pair that does not load
// (a half-written renewal) is logged and the previous one kept.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu    sync.Mutex
	cert  *tls.Certificate
	stamp [2]fileStamp
}

// fileStamp tells a changed file: another file renamed over it (a new
// inode), or new content written in place (modification time, size).
type fileStamp struct {
	fi os.FileInfo
}

func (a fileStamp) same(b fileStamp) bool {
	return a.fi != nil && b.fi != nil && os.SameFile(a.fi, b.fi) &&
		a.fi.ModTime().Equal(b.fi.ModTime()) && a.fi.Size() == b.fi.Size()
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi: fi}, nil
}

// load reads the pair when the files changed since the last load.
func (r *certReloader) load() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err1 := stampOf(r.certFile)
	k, err2 := stampOf(r.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		if r.cert != nil {
			return r.cert, nil
		}
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	if r.cert != nil && r.stamp[0].same(c) && r.stamp[1].same(k) {
		return r.cert, nil
	}
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if r.cert != nil {
			r.log.Warn("TLS certificate changed but does not load; serving the previous one", "cert", r.certFile, "error", err)
			r.stamp = [2]fileStamp{c, k} // warn once per change
			return r.cert, nil
		}
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", r.certFile, r.keyFile, err)
	}
	if r.cert != nil {
		r.log.Info("TLS certificate reloaded", "cert", r.certFile)
	}
	r.cert, r.stamp = &pair, [2]fileStamp{c, k}
	return r.cert, nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.load() }

// limiter bounds requests in flight, in total and per client, and the
// bytes of their bodies held at once.
type limiter struct {
	mu        sync.Mutex
	total     int
	perClient map[string]int
	maxTotal  int
	maxClient int
	bodyBytes int64 // taken by requests in flight
	maxBody   int64
}

func newLimiter(c ServerConfig) *limiter {
	l := &limiter{perClient: map[string]int{}}
	l.set(c)
	return l
}

func (l *limiter) set(c ServerConfig) {
	c.fill()
	l.mu.Lock()
	l.maxTotal, l.maxClient, l.maxBody = c.MaxInFlight, c.MaxInFlightPerClient, c.MaxBodyBytesInFlight
	l.mu.Unlock()
}

// bodyHold is what one request holds of the body budget; release gives it
// back when the request ends (its decoded records live until then).
type bodyHold struct {
	l    *limiter
	held int64
}

// grow makes the request hold at least n bytes of the budget, and says
// whether the budget had them (nothing more is taken when it had not).
func (h *bodyHold) grow(n int64) bool {
	if h == nil || n <= h.held {
		return true
	}
	l := h.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bodyBytes+n-h.held > l.maxBody {
		return false
	}
	l.bodyBytes += n - h.held
	h.held = n
	return true
}

func (h *bodyHold) release() {
	h.l.mu.Lock()
	h.l.bodyBytes -= h.held
	h.l.mu.Unlock()
	h.held = 0
}

func (l *limiter) bodyBudgetError() *Error {
	return errorf(CodeTooManyRequests, "request bodies in flight hold the gateway's budget of %d bytes; retry later", l.maxBody)
}

// enterTotal takes a slot of the total; the caller calls the returned
// function when the request ends.
func (l *limiter) enterTotal() (func(), *Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.maxTotal {
		return nil, errorf(CodeTooManyRequests, "the gateway serves %d requests at once; retry later", l.maxTotal)
	}
	l.total++
	return func() { l.mu.Lock(); l.total--; l.mu.Unlock() }, nil
}

// enterClient takes a slot of client name.
func (l *limiter) enterClient(name string) (func(), *Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perClient[name] >= l.maxClient {
		return nil, errorf(CodeTooManyRequests, "client %q has %d requests in flight, the most allowed; retry later", name, l.maxClient)
	}
	l.perClient[name]++
	return func() {
		l.mu.Lock()
		if l.perClient[name]--; l.perClient[name] <= 0 {
			delete(l.perClient, name)
		}
		l.mu.Unlock()
	}, nil
}
