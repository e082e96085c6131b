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
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
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
}

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
)

// forwarder sends requests to other replicas.
type forwarder struct {
	replica  string
	hash     [sha256.Size]byte
	header   string // the Authorization value it sends
	client   *http.Client
	answerIn time.Duration
	dur      metric.Float64Histogram
	// sent counts requests forwarded (tests).
	sent atomic.Int64
}

func (f *Forwarding) fill() error {
	if len(f.Credential) < MinCredentialBytes {
		return fmt.Errorf("replica credential is %d bytes; at least %d are needed (openssl rand -hex 32)", len(f.Credential), MinCredentialBytes)
	}
	f.ConnectTimeout = cmp.Or(f.ConnectTimeout, DefaultForwardConnectTimeout)
	f.AnswerTimeout = cmp.Or(f.AnswerTimeout, DefaultForwardAnswerTimeout)
	return nil
}

// Forward turns forwarding on (f.Credential set). Call it before serving.
func (s *Server) Forward(f Forwarding) error {
	if err := f.fill(); err != nil {
		return fmt.Errorf("gateway: forwarding: %w", err)
	}
	dial := &net.Dialer{Timeout: f.ConnectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:           dial.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: f.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   f.ConnectTimeout,
		ResponseHeaderTimeout: f.AnswerTimeout,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       50 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	fw := &forwarder{replica: s.g.cfg.Replica, hash: sha256.Sum256(f.Credential),
		header: replicaScheme + string(f.Credential), answerIn: f.AnswerTimeout,
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		dur:    s.g.met.forward}
	s.fwd = fw
	return nil
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
	cl := s.auth.byName(r.Header.Get(headerForwardedClient))
	if cl == nil {
		return nil, errorf(CodeUnauthorized, "a forwarded request for client %q, which this replica does not know", r.Header.Get(headerForwardedClient))
	}
	c.Set(forwardedKey, r.Header.Get(headerForwardedBy))
	return cl, nil
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
	e := s.g.heldElsewhere(c.Request().Context(), name)
	if e == nil || e.Code != CodeMisdirected {
		return false, nil // here, or a lookup that failed: the local path answers
	}
	return true, s.forward(c, e, c.Request().Body)
}

// forwardAfter forwards a request this replica answered misdirected (its
// session of the lease is older than the request's generation, or ended
// since forwardFirst looked), sending the body it already read.
func (s *Server) forwardAfter(c echo.Context, body []byte, err error) error {
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeMisdirected || e.HolderURL == "" || !s.mayForward(c) {
		return err
	}
	return s.forward(c, e, bytes.NewReader(body))
}

// forward sends the request to the holder to names and writes its answer.
// Nothing sent (the holder not reached within the connect bound): to
// itself, 421 as without forwarding. Sent and not answered: 502
// forward_failed, outcome unknown.
func (s *Server) forward(c echo.Context, to *Error, body io.Reader) error {
	start := time.Now()
	res, sent, err := s.fwd.send(c, to.HolderURL, body)
	if err != nil {
		outcome, answer := forwardUnknown, forwardFailed(c.Param("name"), to.Holder, err)
		if !sent {
			outcome, answer = forwardUnreachable, to
		}
		s.fwd.record(c.Request().Context(), start, outcome)
		s.log.Warn("forward failed", "fencegate.lease", c.Param("name"), "holder", to.Holder, "sent", sent, "error", err)
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
	f.sent.Add(1)
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
