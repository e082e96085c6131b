package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/client/wire"
)

// Config of a Client. Zero values take the defaults each field names;
// New refuses a Config it cannot work with, so that nothing is retried
// forever that could never succeed.
type Config struct {
	// BaseURL is where requests go, e.g. "http://fencegate:8080": a load
	// balancer in front of the replicas, or one replica. It must be an
	// http:// or https:// URL with a host, and may have a path prefix; no
	// user information, query or fragment. A lease follows a 421 to the
	// replica that holds its session, and comes back to BaseURL when that
	// replica drains or does not answer.
	BaseURL string
	// Token is the worker's bearer token, without "Bearer " (no spaces or
	// control characters).
	Token string
	// Owner identifies this worker in leases (owner_id). Batch ids are
	// scoped to it: keep it stable across restarts of the worker.
	Owner string
	// TTL of the leases this client acquires; WithTTL overrides it for one
	// lease. Defaults to DefaultTTL.
	TTL time.Duration
	// RenewEvery is the time between renewals; WithRenewEvery overrides it
	// for one lease. Defaults to TTL/3; must be shorter than TTL.
	RenewEvery time.Duration
	// MinBackoff and MaxBackoff bound the wait before a retry: it doubles
	// from MinBackoff up to MaxBackoff, with jitter. Default to
	// DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// HTTP sends the requests. Defaults to a client with a 30s timeout.
	HTTP *http.Client
	// HolderHosts says which hosts a 421's holder_url may name: requests
	// follow it, with the bearer token, only over BaseURL's scheme (never
	// from https to http) and only to BaseURL's host or a host an entry
	// allows. An entry is a host name ("gw1.example.internal", exact), a
	// domain (".example.internal": any host name ending in it; at least
	// two labels), an IP address or a CIDR prefix ("10.0.0.0/8", for
	// replicas advertised by address). Ports are not compared; New refuses
	// an entry of any other form (a URL, a host with a port).
	//
	// nil (the default) allows BaseURL's host and, when it is a host name
	// of three labels or more, every host sharing its parent domain:
	// BaseURL https://fencegate.prod.example.com allows
	// gw-1.prod.example.com, not example.com or other.example.com. A
	// one- or two-label host name ("fencegate-gateway", "example.com")
	// and an IP literal allow only themselves. Under a public suffix of two
	// labels (fencegate.co.uk) the default would allow the whole suffix:
	// list the hosts instead.
	//
	// A holder_url not allowed makes the 421 a failed call, matching
	// ErrHolderNotAllowed: retried at BaseURL after a backoff like a
	// transport error, with nothing sent to the holder.
	HolderHosts []string
	// Logger receives the SDK's records: retried acquires, failed
	// renewals and releases, losses (Warn); grants, new generations and
	// releases (Info); each renewal, Produce call and produce retry
	// (Debug). nil (the default) logs nothing.
	Logger *slog.Logger
	// Hooks are called at the points of a lease's life, for metrics and
	// tracing: each implements one or more of the hook interfaces (Hook).
	Hooks []Hook
	// DisableWatch turns off the watch stream of each lease. By default
	// a lease watches its events (GET /v1/leases/{name}/events) and is
	// lost as soon as one shows a later generation or its end (a
	// NoticeError), instead of at the next renewal or batch. A notice is
	// never a safety signal: the renewal loop decides alone when notices
	// are lost, late or off, and the gateway's fences hold regardless.
	// Each lease holds one more HTTP connection while it lives.
	DisableWatch bool
}

// Defaults of Config.
const (
	// DefaultTTL is the TTL of a lease when neither Config.TTL nor WithTTL
	// says otherwise.
	DefaultTTL = 10 * time.Second
	// DefaultMinBackoff and DefaultMaxBackoff bound the wait before a
	// retry (Config.MinBackoff, Config.MaxBackoff).
	DefaultMinBackoff = 50 * time.Millisecond
	DefaultMaxBackoff = 2 * time.Second
	// defaultHTTPTimeout bounds one request of the default Config.HTTP.
	defaultHTTPTimeout = 30 * time.Second
)

// defaultRenewEvery is the renewal interval of a lease of ttl when none is
// given: three renewals per TTL, so that two may fail.
func defaultRenewEvery(ttl time.Duration) time.Duration { return ttl / 3 }

// checkTiming is the rule for a lease's TTL and renewal interval, of
// Config and of WithTTL and WithRenewEvery alike.
func checkTiming(ttl, renewEvery time.Duration) error {
	switch {
	case ttl < time.Millisecond:
		return errors.New("fencegate: TTL must be at least 1ms")
	case renewEvery <= 0 || renewEvery >= ttl:
		return errors.New("fencegate: RenewEvery must be positive and shorter than TTL")
	}
	return nil
}

// Client talks to a gateway. It is safe for concurrent use. Close releases
// the leases it holds.
type Client struct {
	cfg     Config
	holders *holderPolicy
	log     *slog.Logger

	// ctx ends, with cause ErrClosed, when Close begins: it ends waiting
	// acquires.
	ctx   context.Context
	close context.CancelCauseFunc

	mu     sync.Mutex
	leases map[*Lease]struct{} // the leases whose renewer runs
	closed chan struct{}       // closed when the first Close returns
}

// New validates cfg and fills its defaults. It sends no request.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" || cfg.Token == "" || cfg.Owner == "" {
		return nil, errors.New("fencegate: BaseURL, Token and Owner are required")
	}
	if strings.ContainsFunc(cfg.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, errors.New(`fencegate: Token must be the bearer token alone: no "Bearer " prefix, spaces or control characters`)
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	cfg.TTL = cmp.Or(cfg.TTL, DefaultTTL)
	cfg.RenewEvery = cmp.Or(cfg.RenewEvery, defaultRenewEvery(cfg.TTL))
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, DefaultMinBackoff)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, DefaultMaxBackoff)
	if err := checkTiming(cfg.TTL, cfg.RenewEvery); err != nil {
		return nil, err
	}
	if cfg.MinBackoff <= 0 || cfg.MaxBackoff < cfg.MinBackoff {
		return nil, errors.New("fencegate: MinBackoff must be positive and at most MaxBackoff")
	}
	if err := checkHooks(cfg.Hooks); err != nil {
		return nil, err
	}
	holders, err := newHolderPolicy(cfg.BaseURL, cfg.HolderHosts)
	if err != nil {
		return nil, err
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: defaultHTTPTimeout}
	}
	c := &Client{cfg: cfg, holders: holders, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		leases: map[*Lease]struct{}{}, closed: make(chan struct{})}
	c.ctx, c.close = context.WithCancelCause(context.Background())
	return c, nil
}

// ErrClosed is the error of Acquire and AcquireWait on a closed Client,
// and of a waiting AcquireWait when Close is called.
var ErrClosed = errors.New("fencegate: client closed")

// Close releases every lease the client holds (as Release does, all at
// once) and stops their renewals. Acquire and AcquireWait return ErrClosed
// from then on, a waiting AcquireWait too.
//
// ctx bounds the releases only: the renewals stop whether or not ctx ends
// first, and a lease whose release did not get through expires at the
// gateway after its TTL. Close returns the errors of the releases that
// did not get through (nil for leases already lost). It is idempotent: a
// later call waits for the first one (or for its own ctx) and returns nil.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	first := c.ctx.Err() == nil
	c.close(ErrClosed)
	leases := slices.Collect(maps.Keys(c.leases))
	c.mu.Unlock()
	if !first {
		select {
		case <-c.closed:
		case <-ctx.Done():
		}
		return nil
	}
	defer close(c.closed)
	errs := make([]error, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Release(ctx); err != nil && errors.Is(l.Err(), ErrReleased) {
				errs[i] = err // the lease was still ours: its release failed
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// start starts l's renewer and tracks l for Close; false after Close.
func (c *Client) start(l *Lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		return false
	}
	c.leases[l] = struct{}{}
	go l.renewLoop()
	if !c.cfg.DisableWatch {
		go l.watchLoop()
	}
	return true
}

// forget stops tracking l: its renewer stopped.
func (c *Client) forget(l *Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.leases, l)
}

// call sends one request to base and decodes a 2xx body into out. An
// error reply is a *Problem; anything else is a transport error.
func (c *Client) call(ctx context.Context, base, method, path string, body, out any) error {
	var rd io.Reader
	contentType := ""
	if body != nil {
		raw, ct, err := encodeBody(body)
		if err != nil {
			return err
		}
		rd, contentType = bytes.NewReader(raw), ct
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return errorf("reading the reply to %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		p := &Problem{}
		_ = json.Unmarshal(raw, p) // a proxy's HTML page: Status says enough
		p.Status = resp.StatusCode
		p.RetryAfter = retryAfter(resp.Header)
		if p.HolderURL != "" {
			// Not a *Problem: the reaction table must not follow it
			// (FM42). The gateway answered, so nothing was done.
			if err := c.holders.allow(p.HolderURL); err != nil {
				return errorf("%w (answer: %s)", err, p)
			}
		}
		return p
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return errorf("decoding the reply to %s %s: %w", method, path, err)
		}
	}
	return nil
}

// encodeBody encodes a request body: a batch in the binary format, which
// the gateway decodes at a fraction of JSON's cost, anything else as JSON.
func encodeBody(body any) ([]byte, string, error) {
	if b, ok := body.(wire.Batch); ok {
		return wire.Append(make([]byte, 0, wire.Size(b)), b), wire.ContentType, nil
	}
	raw, err := json.Marshal(body)
	return raw, "application/json", err
}

// backoff is the wait before retry n (1, 2, ...) after err (Backoff with
// this client's bounds and the Retry-After of a Problem).
func (c *Client) backoff(n int, err error) time.Duration {
	var retryAfter time.Duration
	var p *Problem
	if errors.As(err, &p) {
		retryAfter = p.RetryAfter
	}
	return Backoff(n, c.cfg.MinBackoff, c.cfg.MaxBackoff, retryAfter)
}

// Backoff is the SDK's wait before retry n (1, 2, ...): doubling from
// minWait to maxWait, the upper half jittered, and never less than the
// Retry-After the gateway asked for (0: none). It is exported for callers
// that retry on their own and should spread their retries as SDK workers
// do.
func Backoff(n int, minWait, maxWait, retryAfter time.Duration) time.Duration {
	d := minWait
	for i := 1; i < n && d < maxWait; i++ {
		d *= 2
	}
	d = min(d, maxWait)
	d = d/2 + rand.N(d/2+1)
	return max(d, retryAfter)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Grant is an acknowledged generation of a lease: the answer to an acquire
// or to a request for a new generation.
type Grant struct {
	Name    string `json:"name"`
	OwnerID string `json:"owner_id"`
	// Token names the generation; tokens of a lease only grow.
	Token int64 `json:"token"`
	// ExpiresAt is the lease's expiry in database time; the SDK keeps its
	// own, earlier, local deadline.
	ExpiresAt       time.Time `json:"expires_at"`
	TTLMillis       int64     `json:"ttl_ms"`
	Topic           string    `json:"topic"`
	Partition       int32     `json:"partition"`
	TransactionalID string    `json:"transactional_id"`
	// ProducerID and ProducerEpoch are the ones the generation's barrier
	// record names; they do not change during the generation.
	ProducerID    int64 `json:"producer_id"`
	ProducerEpoch int16 `json:"producer_epoch"`
}

// grant asks base for a grant (token 0) or a new generation (token > 0)
// of ttl. It returns the time the request started: the local deadline is
// that time plus the TTL, never later than the gateway's expiry.
func (c *Client) grant(ctx context.Context, base, name string, token int64, ttl time.Duration) (Grant, time.Time, error) {
	start := time.Now()
	body := map[string]any{"name": name, "owner_id": c.cfg.Owner, "ttl_ms": ttl.Milliseconds()}
	if token > 0 {
		body["token"] = token
	}
	var g Grant
	err := c.call(ctx, base, http.MethodPost, "/v1/leases", body, &g)
	return g, start, err
}

// AcquireOption sets something of one lease other than the Client's
// Config says: WithTTL, WithRenewEvery.
type AcquireOption func(*leaseSettings)

// leaseSettings are what a lease takes from Config or its AcquireOptions.
type leaseSettings struct {
	ttl, renewEvery time.Duration
}

// WithTTL is the lease's TTL instead of Config.TTL. Its renewal interval
// is then TTL/3, unless WithRenewEvery is given too.
func WithTTL(ttl time.Duration) AcquireOption {
	return func(s *leaseSettings) { s.ttl = ttl }
}

// WithRenewEvery is the lease's renewal interval instead of
// Config.RenewEvery (or TTL/3 of a WithTTL); it must be shorter than the
// lease's TTL.
func WithRenewEvery(d time.Duration) AcquireOption {
	return func(s *leaseSettings) { s.renewEvery = d }
}

// settings applies opts to the Client's Config.
func (c *Client) settings(opts []AcquireOption) (leaseSettings, error) {
	var s leaseSettings
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	if s.ttl == 0 {
		s.ttl, s.renewEvery = c.cfg.TTL, cmp.Or(s.renewEvery, c.cfg.RenewEvery)
	}
	s.renewEvery = cmp.Or(s.renewEvery, defaultRenewEvery(s.ttl))
	return s, checkTiming(s.ttl, s.renewEvery)
}

// Acquire takes lease name and keeps it renewed in the background until
// Release, Close or loss. opts set the lease's TTL and renewal interval
// (WithTTL, WithRenewEvery); invalid ones are returned at once, with
// nothing sent.
//
// ctx bounds the acquiring only, never the lease's life: once Acquire has
// returned, cancelling ctx does not end the lease, which goes on renewing
// until Release, Close or its loss (Lost). Answers that granted nothing
// (draining: behind a load balancer the retry reaches another replica;
// too_many_requests; kafka_unavailable, store_unavailable, internal;
// transport errors, such as a gateway not listening yet) are retried with
// backoff until ctx ends, so with context.Background() Acquire retries
// them for as long as they last: give ctx a deadline to bound the wait,
// and a Logger to see the retries. lease_held and the other refusals are
// returned at once, as a *Problem; use AcquireWait to wait for a held
// lease.
//
// After a lost reply the gateway may hold a grant that was acknowledged to
// no one: a retry then sees lease_held naming this worker's own owner id,
// until that grant expires.
func (c *Client) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	return c.acquire(ctx, name, false, opts)
}

// AcquireWait is Acquire that also waits while another owner holds the
// lease (lease_held), retrying with backoff until the lease is granted or
// ctx ends. ctx bounds the wait only, never the lease's life, as for
// Acquire. The error after ctx ends matches both the context's error and
// the last answer (ErrorCode gives lease_held); after Close it matches
// ErrClosed.
func (c *Client) AcquireWait(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	return c.acquire(ctx, name, true, opts)
}

func (c *Client) acquire(parent context.Context, name string, wait bool, opts []AcquireOption) (*Lease, error) {
	s, err := c.settings(opts)
	if err != nil {
		return nil, err
	}
	if c.ctx.Err() != nil {
		return nil, errorf("acquire %s: %w", name, ErrClosed)
	}
	begun := time.Now()
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	defer context.AfterFunc(c.ctx, func() { cancel(ErrClosed) })()
	var last error // the last answer, for the error after ctx ends
	for n := 1; ; n++ {
		if ctx.Err() != nil {
			return nil, ended("acquire "+name, ctx, last)
		}
		g, start, err := c.grant(ctx, c.cfg.BaseURL, name, 0, s.ttl)
		if err == nil {
			return c.begin(parent, name, s, g, start, begun)
		}
		if ctx.Err() != nil {
			return nil, ended("acquire "+name, ctx, last)
		}
		last = err
		switch r := reactionTo(err); {
		case r == held && wait:
			c.log.Debug("waiting for a held lease", "lease", name, "attempt", n, "err", err)
		case r == retry:
			c.log.Warn("acquire failed, retrying", "lease", name, "attempt", n, "err", err)
		default:
			return nil, err
		}
		_ = sleep(ctx, c.backoff(n, err)) // a context that ended is reported above
	}
}

// begin makes the lease of a grant and starts its renewal. After Close it
// releases the grant instead (bounded by the TTL: the grant expires
// then) and returns ErrClosed.
func (c *Client) begin(parent context.Context, name string, s leaseSettings, g Grant, start, begun time.Time) (*Lease, error) {
	l := c.newLease(name, s, g, start)
	if !c.start(l) {
		close(l.done) // no renewer was started
		ctx, cancel := context.WithTimeout(parent, s.ttl)
		defer cancel()
		_ = l.Release(ctx)
		return nil, errorf("acquire %s: %w", name, ErrClosed)
	}
	latency := time.Since(begun)
	c.log.Info("lease acquired", "lease", name, "token", g.Token, "partition", g.Partition, "latency", latency)
	each(c.cfg.Hooks, func(h AcquiredHook) { h.OnAcquired(l, latency) })
	return l, nil
}

// ended is the error of a call (what) whose context ended: its cause
// (ErrClosed after Close), and the last answer before it if there was
// one.
func ended(what string, ctx context.Context, last error) error {
	if last == nil {
		return errorf("%s: %w", what, context.Cause(ctx))
	}
	return errorf("%s: %w (last answer: %w)", what, context.Cause(ctx), last)
}
