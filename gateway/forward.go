package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// Forwarding lets a replica that does not hold a lease's session pass the
// lease's produce, renew and release requests to the live replica that
// does, so that a client behind any load balancer needs no 421 handling
// (docs/design.md, "Forwarding"; FM50). Acquire is always served where it
// arrives.
//
// A forwarded request goes one hop: it carries the replicas' shared
// credential and the name of the client the forwarder authenticated, and
// a replica never forwards a request that reached it forwarded. The
// holder judges the request as if the client had sent it; its answer
// reaches the client unchanged.
type Forwarding struct {
	// Credential is the secret every replica of the deployment shares (at
	// least MinCredentialBytes): it authenticates forwarded requests. A
	// replica without one neither forwards nor accepts forwarded requests.
	Credential []byte
	// RootCAs verify other replicas' HTTPS addresses (nil: the system
	// roots).
	RootCAs *x509.CertPool
	// ConnectTimeout bounds reaching the holder (default
	// DefaultForwardConnectTimeout). A holder not reached within it was
	// sent nothing: the answer is 421 with its address, as without
	// forwarding.
	ConnectTimeout time.Duration
	// AnswerTimeout bounds the wait for the holder's answer once the
	// request is sent (default DefaultForwardAnswerTimeout). Past it, and
	// on any failure after the request left, the answer is 502
	// forward_failed: the outcome is unknown.
	AnswerTimeout time.Duration
	// Fleet are the host[:port] globs (txnmap.Match) of the replicas'
	// advertise URLs: the replica credential goes only to a holder whose
	// registered URL's host is one of them, and only over https:// when
	// this replica advertises https:// (FM88). This replica's own
	// advertise URL must be of the fleet, or Forward refuses. Default
	// (DefaultFleet): the host of this replica's advertise URL, any port.
	Fleet []string
	// ClientCertFile and ClientKeyFile are the certificate the replica
	// presents when forwarding to a replica that requires mutual TLS
	// (re-read when either file changes). serve sets them to its own
	// --tls-cert and --tls-key when --tls-client-ca is on.
	ClientCertFile, ClientKeyFile string
	// HolderCacheFor is how long a holder found for a lease is reused
	// before the registry is read again (default
	// DefaultHolderCacheFor; negative: every request reads it). A stale
	// entry costs one hop to a replica that answers for itself (421
	// toward the real holder, or not_holder), never a wrong answer; any
	// answer but a success forgets it.
	HolderCacheFor time.Duration
}

// DefaultHolderCacheFor is the default of Forwarding.HolderCacheFor: well
// under the three heartbeat intervals after which a silent holder is
// taken for gone.
const DefaultHolderCacheFor = time.Second

// MinCredentialBytes is the shortest replica credential accepted.
const MinCredentialBytes = 32

// DefaultForwardConnectTimeout is the default of Forwarding.ConnectTimeout.
const DefaultForwardConnectTimeout = time.Second

// DefaultForwardAnswerTimeout is the default of Forwarding.AnswerTimeout:
// above a batch's longest path at the holder (a wait behind the batch in
// flight and its own commit, each bounded by the 10 s commit timeout).
const DefaultForwardAnswerTimeout = 25 * time.Second

// Headers of a forwarded request.
const (
	// headerForwardedBy names the replica that forwarded the request.
	headerForwardedBy = "Fencegate-Forwarded-By"
	// headerForwardedClient names the client the forwarder authenticated.
	headerForwardedClient = "Fencegate-Forwarded-Client"
	// replicaScheme is the Authorization scheme of the replica credential.
	replicaScheme = "Fencegate-Replica "
)

// forwardedKey marks, in the echo context, a request that arrived
// forwarded: it is never forwarded again.
const forwardedKey = "fencegate.forwarded"

// Forward outcomes, the outcome label of fencegate.forward.duration.
const (
	forwardAnswered    = "answered"    // the holder answered; passed on as is
	forwardUnreachable = "unreachable" // nothing sent: 421 to the holder
	forwardUnknown     = "unknown"     // sent, no answer: 502 forward_failed
	forwardRefused     = "refused"     // the holder's address is not of the fleet: nothing sent
)

// forwarder sends requests to other replicas.
type forwarder struct {
	replica  string
	fleet    []string
	https    bool // forward only to https:// (this replica advertises it)
	hash     [sha256.Size]byte
	header   string // the Authorization value it sends
	client   *http.Client
	answerIn time.Duration
	dur      metric.Float64Histogram
	holders  *holderCache
}

func (f *Forwarding) fill(advertise string) error {
	if len(f.Credential) < MinCredentialBytes {
		return fmt.Errorf("replica credential is %d bytes; at least %d are needed (openssl rand -hex 32)", len(f.Credential), MinCredentialBytes)
	}
	if len(f.Fleet) == 0 {
		f.Fleet = DefaultFleet(advertise)
	}
	for _, h := range f.Fleet {
		if err := txnmap.ValidatePattern(h); err != nil {
			return fmt.Errorf("fleet host %q: %w", h, err)
		}
	}
	if (f.ClientCertFile == "") != (f.ClientKeyFile == "") {
		return errors.New("a forwarding client certificate needs both its certificate and its key")
	}
	f.ConnectTimeout = cmp.Or(f.ConnectTimeout, DefaultForwardConnectTimeout)
	f.AnswerTimeout = cmp.Or(f.AnswerTimeout, DefaultForwardAnswerTimeout)
	f.HolderCacheFor = cmp.Or(f.HolderCacheFor, DefaultHolderCacheFor)
	return nil
}

// DefaultFleet is Forwarding.Fleet's default: the host of the replica's
// advertise URL, with any port (replicas on one machine).
func DefaultFleet(advertise string) []string {
	u, err := url.Parse(advertise)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	h := u.Hostname()
	if strings.Contains(h, ":") {
		h = `\[` + h + `\]` // an IPv6 literal; '[' starts a class in a glob
	}
	return []string{h, h + ":*"}
}

// Forward turns forwarding on (f.Credential set). Call it before serving.
// It refuses a replica whose own advertise URL is not of f.Fleet: it
// would register an address the fleet does not forward to.
func (s *Server) Forward(f Forwarding) error {
	advertise := s.g.cfg.AdvertiseURL
	if err := f.fill(advertise); err != nil {
		return fmt.Errorf("gateway: forwarding: %w", err)
	}
	fw := &forwarder{replica: s.g.cfg.Replica, fleet: f.Fleet, https: strings.HasPrefix(advertise, "https://")}
	if err := fw.ofFleet(advertise); err != nil {
		return fmt.Errorf("gateway: forwarding: this replica's advertise URL: %w", err)
	}
	tc := &tls.Config{RootCAs: f.RootCAs, MinVersion: tls.VersionTLS12}
	if f.ClientCertFile != "" {
		r := &certReloader{certFile: f.ClientCertFile, keyFile: f.ClientKeyFile, log: s.log}
		if _, err := r.load(); err != nil {
			return fmt.Errorf("gateway: forwarding: client certificate: %w", err)
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return r.load() }
	}
	dial := &net.Dialer{Timeout: f.ConnectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:           dial.DialContext,
		TLSClientConfig:       tc,
		TLSHandshakeTimeout:   f.ConnectTimeout,
		ResponseHeaderTimeout: f.AnswerTimeout,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       50 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	fw.hash, fw.header, fw.answerIn = sha256.Sum256(f.Credential), replicaScheme+string(f.Credential), f.AnswerTimeout
	fw.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	fw.dur, fw.holders = s.g.met.forward, newHolderCache(f.HolderCacheFor)
	s.fwd = fw
	return nil
}

// ofFleet says why the replica credential must not go to u, or nil: u
// is a replica of the fleet (its host matches a Fleet glob), reached
// over https:// when this replica advertises https://, with nothing
// but a scheme, a host and a port. The one check before the credential
// leaves (FM88).
func (f *forwarder) ofFleet(u string) error {
	pu, err := url.Parse(u)
	switch {
	case err != nil || pu.Host == "" || pu.User != nil || pu.RawQuery != "" || pu.Fragment != "" || (pu.Path != "" && pu.Path != "/"):
		return fmt.Errorf("%q is not a replica's base URL (scheme://host:port)", u)
	case pu.Scheme != "https" && (f.https || pu.Scheme != "http"):
		return fmt.Errorf("%q is not https://, and this replica's fleet speaks TLS", u)
	}
	for _, h := range f.fleet {
		if txnmap.Match(h, pu.Host) {
			return nil
		}
	}
	return fmt.Errorf("the host of %q is none of the fleet's %q", u, f.fleet)
}

// replicaCredential reports whether r carries the replica credential's
// scheme, and whether the credential is this replica's.
func (f *forwarder) replicaCredential(r *http.Request) (present, valid bool) {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), replicaScheme)
	if !ok {
		return r.Header.Get(headerForwardedBy) != "" || r.Header.Get(headerForwardedClient) != "", false
	}
	if f == nil {
		return true, false
	}
	sum := sha256.Sum256([]byte(v))
	return true, subtle.ConstantTimeCompare(sum[:], f.hash[:]) == 1
}

// authenticateForwarded returns the client a forwarded request names, or
// nil when r is not forwarded. A request that names a client or a
// forwarder without the credential is refused: a client cannot pass for
// another by adding a header.
func (s *Server) authenticateForwarded(c echo.Context) (*Client, *Error) {
	r := c.Request()
	present, valid := s.fwd.replicaCredential(r)
	switch {
	case !present:
		return nil, nil
	case s.fwd == nil:
		return nil, errorf(CodeUnauthorized, "a forwarded request, and this replica has no replica credential: it accepts none")
	case !valid:
		return nil, errorf(CodeUnauthorized, "a forwarded request without the replica credential")
	}
	if !forwardable[r.Method+" "+c.Path()] {
		return nil, errorf(CodeUnauthorized, "the replica credential is accepted only on the requests replicas forward (produce, renew, release), not on %s %s", r.Method, c.Path())
	}
	by := r.Header.Get(headerForwardedBy)
	if !replicaName(by) {
		return nil, errorf(CodeUnauthorized, "a forwarded request must name its replica in %s (1 to %d printable ASCII bytes)", headerForwardedBy, maxReplicaName)
	}
	cl := s.auth.byName(r.Header.Get(headerForwardedClient))
	if cl == nil {
		return nil, errorf(CodeUnauthorized, "a forwarded request for client %q, which this replica does not know", r.Header.Get(headerForwardedClient))
	}
	c.Set(forwardedKey, by)
	c.SetRequest(r.WithContext(leasestore.ForwardedBy(r.Context(), by)))
	return cl, nil
}

// forwardable are the routes a replica forwards (method and template):
// the only ones the replica credential opens (FM89). Acquire, reads,
// watches and the admin API are served where they arrive, so a holder of
// the credential gains nothing there.
var forwardable = map[string]bool{
	http.MethodPost + " /v1/leases/:name/records": true,
	http.MethodPatch + " /v1/leases/:name":        true,
	http.MethodDelete + " /v1/leases/:name":       true,
}

// maxReplicaName bounds a forwarding replica's name as the audit keeps it.
const maxReplicaName = 253

// replicaName says whether by can name a forwarding replica in the audit:
// 1..maxReplicaName printable ASCII bytes (a host or pod name).
func replicaName(by string) bool {
	if by == "" || len(by) > maxReplicaName {
		return false
	}
	for i := 0; i < len(by); i++ {
		if by[i] <= ' ' || by[i] > '~' {
			return false
		}
	}
	return true
}

// mayForward reports whether a request may be forwarded from here: the
// replica forwards, and the request did not arrive forwarded.
func (s *Server) mayForward(c echo.Context) bool {
	return s.fwd != nil && c.Get(forwardedKey) == nil
}

// forwardFirst forwards the request, its body unread, when forwarding is
// on, this replica has no session of the lease and another live replica
// holds it. done is false when the request is this replica's to answer.
func (s *Server) forwardFirst(c echo.Context, name string) (done bool, err error) {
	if !s.mayForward(c) || s.g.session(name) != nil {
		return false, nil
	}
	e := s.fwd.holders.get(name)
	if e == nil {
		e = s.g.heldElsewhere(c.Request().Context(), name)
		if e == nil || e.Code != CodeMisdirected {
			return false, nil // here, or a lookup that failed: the local path answers
		}
		s.fwd.holders.put(name, e)
	}
	return true, s.forward(c, name, e, c.Request().Body)
}

// forwardAfter forwards a request this replica answered misdirected (its
// session of the lease is older than the request's generation, or ended
// since forwardFirst looked), sending the body it already read.
func (s *Server) forwardAfter(c echo.Context, name string, body []byte, err error) error {
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeMisdirected || e.HolderURL == "" || !s.mayForward(c) {
		return err
	}
	return s.forward(c, name, e, bytes.NewReader(body))
}

// forward sends the request for lease name to the holder that to (a
// misdirected answer) names, and writes the holder's answer. Nothing sent
// (the holder not reached within the connect bound): to itself, 421 as
// without forwarding. Sent and not answered: 502 forward_failed, outcome
// unknown.
func (s *Server) forward(c echo.Context, name string, to *Error, body io.Reader) error {
	start := time.Now()
	if err := s.fwd.ofFleet(to.HolderURL); err != nil {
		s.fwd.holders.forget(name)
		s.fwd.record(c.Request().Context(), start, forwardRefused)
		s.log.Error("forward refused: the holder's registered address is not of the fleet; nothing sent", "fencegate.lease", name, "holder", to.Holder, "error", err)
		return strayHolder(name, to.Holder)
	}
	res, sent, err := s.fwd.send(c, to.HolderURL, body)
	if err != nil || res.StatusCode >= 300 {
		s.fwd.holders.forget(name)
	}
	if err != nil {
		outcome, answer := forwardUnknown, forwardFailed(name, to.Holder, err)
		if !sent {
			outcome, answer = forwardUnreachable, to
		}
		s.fwd.record(c.Request().Context(), start, outcome)
		s.log.Warn("forward failed", "fencegate.lease", name, "holder", to.Holder, "sent", sent, "error", err)
		return answer
	}
	defer res.Body.Close()
	s.fwd.record(c.Request().Context(), start, forwardAnswered)
	copyAnswer(c.Response(), res)
	return nil
}

func (f *forwarder) record(ctx context.Context, start time.Time, outcome string) {
	f.dur.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attribute.String("outcome", outcome)))
}

// send sends c's request to base. sent reports whether the request's
// headers left this replica: until then the holder has nothing to act on.
func (f *forwarder) send(c echo.Context, base string, body io.Reader) (res *http.Response, sent bool, err error) {
	in := c.Request()
	ctx, cancel := context.WithTimeout(in.Context(), f.answerIn)
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	out, err := http.NewRequestWithContext(ctx, in.Method, strings.TrimSuffix(base, "/")+in.URL.RequestURI(), body)
	if err != nil {
		cancel()
		return nil, false, err
	}
	out.ContentLength = in.ContentLength
	if _, ok := body.(*bytes.Reader); !ok && in.ContentLength == 0 {
		out.Body = http.NoBody
	}
	for _, h := range forwardedHeaders {
		if v := in.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	out.Header.Set("Authorization", f.header)
	out.Header.Set(headerForwardedBy, f.replica)
	out.Header.Set(headerForwardedClient, client(c).Name)
	res, err = f.client.Do(out)
	if err != nil {
		cancel()
		return nil, wrote.Load(), err
	}
	res.Body = cancelOnClose{ReadCloser: res.Body, cancel: cancel}
	return res, true, nil
}

// forwardedHeaders are the client's headers the holder needs.
var forwardedHeaders = []string{echo.HeaderContentType, echo.HeaderAccept}

// answerHeaders are the holder's headers passed on to the client.
var answerHeaders = []string{echo.HeaderContentType, "Retry-After", "Allow"}

// copyAnswer writes the holder's answer as this replica's.
func copyAnswer(w *echo.Response, res *http.Response) {
	for _, h := range answerHeaders {
		if v := res.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(res.StatusCode)
	_, _ = io.Copy(w, res.Body)
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// forwardFailed is the answer to a request sent to the holder and not
// answered: it may have been acted on.
func forwardFailed(name, holder string, err error) *Error {
	return &Error{Code: CodeForwardFailed,
		Detail:  fmt.Sprintf("the request for lease %q was sent to replica %q, which did not answer (%v): the outcome is unknown; retry the same request", name, holder, err),
		Members: Members{Holder: holder}}
}

// strayHolder is the answer when the holder's registered address is not
// of the fleet: 421 without the address (a client sent there would carry
// its bearer token to it), nothing done anywhere.
func strayHolder(name, holder string) *Error {
	return &Error{Code: CodeMisdirected,
		Detail:  fmt.Sprintf("lease %q is held on replica %q, whose registered address is not of this fleet: nothing was sent; the operator must look at the replicas table", name, holder),
		Members: Members{Holder: holder}}
}

// holderCache remembers where leases' holders were found.
type holderCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]cachedHolder
}

type cachedHolder struct {
	e     *Error
	until time.Time
}

// maxCachedHolders bounds the cache: past it, expired entries go, and if
// none had expired, all of them.
const maxCachedHolders = 1 << 16

func newHolderCache(ttl time.Duration) *holderCache {
	return &holderCache{ttl: ttl, m: map[string]cachedHolder{}}
}

// get returns the misdirected answer remembered for name, or nil.
func (h *holderCache) get(name string) *Error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.m[name]; ok && time.Now().Before(c.until) {
		return c.e
	}
	return nil
}

func (h *holderCache) put(name string, e *Error) {
	if h.ttl <= 0 {
		return
	}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.m) >= maxCachedHolders {
		for k, c := range h.m {
			if !now.Before(c.until) {
				delete(h.m, k)
			}
		}
		if len(h.m) >= maxCachedHolders {
			clear(h.m)
		}
	}
	h.m[name] = cachedHolder{e: e, until: now.Add(h.ttl)}
}

func (h *holderCache) forget(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, name)
}
