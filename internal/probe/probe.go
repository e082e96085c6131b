// Package probe answers a readiness check from its last result: one check
// runs at a time, and its result serves every caller for Config.Every
// after it ended, so any number of callers cost at most one check per
// interval (FM43). /readyz needs no credentials and each check costs the
// dependencies a round trip (Postgres, a Kafka metadata request): checked
// per call, a flood of probes is a flood of queries.
//
// The check runs detached from its callers' contexts, bounded by
// Config.Timeout: a caller that hangs up does not cancel the check the
// others wait for.
//
// It must never run two checks at once or check per caller: the probe is
// unauthenticated, and a probe that reached the dependencies per request
// would let anyone flood them.
package probe

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	// DefaultEvery is how long a result is served: a kubelet or load
	// balancer probes every few seconds, so a second-old answer is fresh.
	DefaultEvery = time.Second
	// DefaultTimeout bounds one check (the former per-request budget of
	// /readyz).
	DefaultTimeout = 3 * time.Second
)

// Config of a Cache. Zero fields take the defaults.
type Config struct {
	// Every is how long a result is served after its check ended
	// (default DefaultEvery).
	Every time.Duration
	// Timeout bounds one check (default DefaultTimeout).
	Timeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Cache serves the result of check. It is safe for concurrent use.
type Cache struct {
	check func(context.Context) error
	cfg   Config
	// Checks counts the checks run.
	checks atomic.Int64

	mu      sync.Mutex
	valid   bool
	at      time.Time // when the last check ended
	err     error
	running chan struct{} // closed when the check in flight ends; nil: none
}

// New returns a Cache of check.
func New(check func(context.Context) error, cfg Config) *Cache {
	cfg.Every = cmp.Or(cfg.Every, DefaultEvery)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Cache{check: check, cfg: cfg}
}

// Check returns the last result while it is younger than Every; otherwise
// it waits for the check in flight, starting one when none is, or until
// ctx ends (then ctx's error).
func (c *Cache) Check(ctx context.Context) error {
	c.mu.Lock()
	if c.valid && c.cfg.Now().Sub(c.at) < c.cfg.Every {
		err := c.err
		c.mu.Unlock()
		return err
	}
	wait := c.running
	if wait == nil {
		wait = make(chan struct{})
		c.running = wait
		go c.run(wait)
	}
	c.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Checks returns the number of checks run.
func (c *Cache) Checks() int64 { return c.checks.Load() }

func (c *Cache) run(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	c.checks.Add(1)
	err := c.check(ctx)
	cancel()
	c.mu.Lock()
	c.valid, c.at, c.err, c.running = true, c.cfg.Now(), err, nil
	c.mu.Unlock()
	close(done)
}
