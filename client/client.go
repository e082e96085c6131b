package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/fencegate/fencegate/client/wire"
)

// Config of a Client. Zero durations take their defaults.
type Config struct {
	// BaseURL is where requests go, e.g. "http://fencegate:8080": a load
	// balancer in front of the replicas, or one replica. A lease follows a
	// 421 to the replica that holds its session, and comes back to BaseURL
	// when that replica drains or does not answer.
	BaseURL string
	// Token is the worker's bearer token.
	Token string
	// Owner identifies this worker in leases (owner_id). Batch ids are
	// scoped to it: keep it stable across restarts of the worker.
	Owner string
	// TTL of the leases this client acquires. Defaults to 10s.
	TTL time.Duration
	// RenewEvery is the time between renewals. Defaults to TTL/3; must be
	// shorter than TTL.
	RenewEvery time.Duration
	// MinBackoff and MaxBackoff bound the wait before a retry: it doubles
	// from MinBackoff up to MaxBackoff, with jitter. Default to 50ms and 2s.
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
	// replicas advertised by address). Ports are not compared.
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
}

// Client talks to a gateway. It is safe for concurrent use.
type Client struct {
	cfg     Config
	holders *holderPolicy
}

// New validates cfg and fills its defaults.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" || cfg.Token == "" || cfg.Owner == "" {
		return nil, errors.New("fencegate: BaseURL, Token and Owner are required")
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.RenewEvery == 0 {
		cfg.RenewEvery = cfg.TTL / 3
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	switch {
	case cfg.TTL < time.Millisecond:
		return nil, errors.New("fencegate: TTL must be at least 1ms")
	case cfg.RenewEvery <= 0 || cfg.RenewEvery >= cfg.TTL:
		return nil, errors.New("fencegate: RenewEvery must be positive and shorter than TTL")
	case cfg.MinBackoff <= 0 || cfg.MaxBackoff < cfg.MinBackoff:
		return nil, errors.New("fencegate: MinBackoff must be positive and at most MaxBackoff")
	}
	holders, err := newHolderPolicy(cfg.BaseURL, cfg.HolderHosts)
	if err != nil {
		return nil, err
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{cfg: cfg, holders: holders}, nil
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
		return fmt.Errorf("fencegate: reading the reply to %s %s: %w", method, path, err)
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
				return fmt.Errorf("%w (answer: %s)", err, p.Error())
			}
		}
		return p
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("fencegate: decoding the reply to %s %s: %w", method, path, err)
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

// Default bounds of the wait before a retry (Config.MinBackoff,
// Config.MaxBackoff).
const (
	DefaultMinBackoff = 50 * time.Millisecond
	DefaultMaxBackoff = 2 * time.Second
)

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

// grant asks base for a grant (token 0) or a new generation (token > 0).
// It returns the time the request started: the local deadline is that
// time plus the TTL, never later than the gateway's expiry.
func (c *Client) grant(ctx context.Context, base, name string, token int64) (Grant, time.Time, error) {
	start := time.Now()
	body := map[string]any{"name": name, "owner_id": c.cfg.Owner, "ttl_ms": c.cfg.TTL.Milliseconds()}
	if token > 0 {
		body["token"] = token
	}
	var g Grant
	err := c.call(ctx, base, http.MethodPost, "/v1/leases", body, &g)
	return g, start, err
}

// Acquire takes lease name and keeps it renewed in the background until
// Release or loss.
//
// Answers that granted nothing (draining: behind a load balancer the
// retry reaches another replica; too_many_requests; kafka_unavailable,
// store_unavailable, internal; transport errors) are retried with backoff
// until ctx ends. lease_held and the other refusals are returned at once,
// as a *Problem; use AcquireWait to wait for a held lease.
//
// After a lost reply the gateway may hold a grant that was acknowledged to
// no one: a retry then sees lease_held naming this worker's own owner id,
// until that grant expires.
func (c *Client) Acquire(ctx context.Context, name string) (*Lease, error) {
	return c.acquire(ctx, name, false)
}

// AcquireWait is Acquire that also waits while another owner holds the
// lease (lease_held), retrying with backoff until the lease is granted or
// ctx ends. The error after ctx ends matches both the context's error and
// the last answer (ErrorCode gives lease_held).
func (c *Client) AcquireWait(ctx context.Context, name string) (*Lease, error) {
	return c.acquire(ctx, name, true)
}

func (c *Client) acquire(ctx context.Context, name string, wait bool) (*Lease, error) {
	var last error // the last answer, for the error after ctx ends
	for n := 1; ; n++ {
		g, start, err := c.grant(ctx, c.cfg.BaseURL, name, 0)
		if err == nil {
			return c.newLease(name, g, start), nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("fencegate: acquire %s: %w (last answer: %w)", name, cerr, cmp.Or(last, err))
		}
		last = err
		switch r := reactionTo(err); {
		case r == retry, r == held && wait:
		default:
			return nil, err
		}
		if cerr := sleep(ctx, c.backoff(n, err)); cerr != nil {
			return nil, fmt.Errorf("fencegate: acquire %s: %w (last answer: %w)", name, cerr, err)
		}
	}
}
