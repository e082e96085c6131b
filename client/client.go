// Package client is the Go SDK for fencegate workers. It speaks only the
// HTTP API: acquire a lease, keep it renewed, produce batches, release.
//
// Guarantees it adds on the worker's side (safety never depends on them;
// the broker's epoch fence does):
//   - fail closed: a Lease refuses to produce once its local deadline
//     (request start + TTL, renewed on success) has passed;
//   - an ambiguous commit (generation_ended) is retried once, with the same
//     batch id, under a new generation asked for with the current token;
//   - a 421 from a replica that does not hold the session is followed once
//     to the holder's address;
//   - Lost() is closed when the lease is known lost (notification only).
package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// ErrLeaseLost is returned (wrapped) once a Lease can no longer write.
var ErrLeaseLost = errors.New("lease lost")

// Problem is an error reply of the gateway (RFC 9457).
type Problem struct {
	Status    int    `json:"status"`
	Code      string `json:"code"`
	Detail    string `json:"detail"`
	HolderURL string `json:"holder_url"`
}

func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Detail) }

// Config of a Client.
type Config struct {
	// BaseURL of a gateway replica, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// Token is the worker's bearer token.
	Token string
	// Owner identifies this worker in leases.
	Owner string
	// TTL of leases (default 10s); RenewEvery defaults to TTL/3.
	TTL        time.Duration
	RenewEvery time.Duration
	HTTP       *http.Client
}

// Client talks to a gateway.
type Client struct{ cfg Config }

// New validates cfg and fills defaults.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" || cfg.Token == "" || cfg.Owner == "" {
		return nil, errors.New("client: BaseURL, Token and Owner are required")
	}
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.RenewEvery == 0 {
		cfg.RenewEvery = cfg.TTL / 3
	}
	if cfg.RenewEvery >= cfg.TTL {
		return nil, errors.New("client: RenewEvery must be shorter than TTL")
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{cfg: cfg}, nil
}

// call sends one request to base and decodes a 2xx body into out.
func (c *Client) call(ctx context.Context, base, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		p := &Problem{Status: resp.StatusCode}
		_ = json.Unmarshal(raw, p)
		return p
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// Grant is an acknowledged generation.
type Grant struct {
	Name          string    `json:"name"`
	Token         int64     `json:"token"`
	ExpiresAt     time.Time `json:"expires_at"`
	Topic         string    `json:"topic"`
	Partition     int32     `json:"partition"`
	ProducerEpoch int16     `json:"producer_epoch"`
}

// Lease is an acquired lease, renewed in the background until Release or
// loss.
type Lease struct {
	c    *Client
	name string

	mu       sync.Mutex
	base     string
	grant    Grant
	deadline time.Time
	lost     error

	lostCh   chan struct{}
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	stopOnce sync.Once
}

// Acquire takes lease name; it fails with a *Problem (lease_held, ...) if
// the gateway refuses.
func (c *Client) Acquire(ctx context.Context, name string) (*Lease, error) {
	l := &Lease{c: c, name: name, base: c.cfg.BaseURL, lostCh: make(chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := l.acquire(ctx, 0); err != nil {
		return nil, err
	}
	go l.renewLoop()
	return l, nil
}

// acquire asks for a grant (token 0) or a new generation (token > 0).
func (l *Lease) acquire(ctx context.Context, token int64) error {
	start := time.Now()
	body := map[string]any{"name": l.name, "owner_id": l.c.cfg.Owner, "ttl_ms": l.c.cfg.TTL.Milliseconds()}
	if token > 0 {
		body["token"] = token
	}
	var g Grant
	if err := l.c.call(ctx, l.baseURL(), "POST", "/v1/leases", body, &g); err != nil {
		return err
	}
	l.mu.Lock()
	l.grant, l.deadline = g, start.Add(l.c.cfg.TTL)
	l.mu.Unlock()
	return nil
}

func (l *Lease) baseURL() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.base
}

// Grant returns the current generation.
func (l *Lease) Grant() Grant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grant
}

// Lost is closed once the lease is known lost.
func (l *Lease) Lost() <-chan struct{} { return l.lostCh }

func (l *Lease) markLost(err error) error {
	l.mu.Lock()
	if l.lost == nil {
		l.lost = fmt.Errorf("%w: %v", ErrLeaseLost, err)
	}
	lost := l.lost
	l.mu.Unlock()
	l.once.Do(func() { close(l.lostCh) })
	return lost
}

// live returns the token if the lease may still write (fail closed on the
// local deadline).
func (l *Lease) live() (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return 0, l.lost
	}
	if !time.Now().Before(l.deadline) {
		return 0, fmt.Errorf("%w: local deadline passed", ErrLeaseLost)
	}
	return l.grant.Token, nil
}

func (l *Lease) renewLoop() {
	defer close(l.done)
	t := time.NewTicker(l.c.cfg.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			if err := l.renew(); errors.Is(err, ErrLeaseLost) {
				return
			}
		}
	}
}

func (l *Lease) renew() error {
	token, err := l.live()
	if err != nil {
		return l.markLost(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), l.c.cfg.RenewEvery)
	defer cancel()
	var out struct {
		ExpiresAt time.Time `json:"expires_at"`
	}
	err = l.c.call(ctx, l.baseURL(), "PATCH", "/v1/leases/"+url.PathEscape(l.name),
		map[string]any{"owner_id": l.c.cfg.Owner, "token": token, "ttl_ms": l.c.cfg.TTL.Milliseconds()}, &out)
	if err == nil {
		l.mu.Lock()
		l.deadline = start.Add(l.c.cfg.TTL)
		l.mu.Unlock()
		return nil
	}
	switch reactionTo(err) {
	case regenerate:
		// The session is gone from that replica (drain, restart) or its
		// generation ended: a new generation with the current token is
		// also a renewal.
		return l.acquire(ctx, token)
	case follow:
		l.follow(err)
	case lost:
		return l.markLost(err)
	}
	return err // transient: the local deadline decides
}

// reaction is what a worker does about an error reply; renewal and produce
// share it, so they agree on what means lost and what means "ask for a
// new generation".
type reaction int

const (
	transient  reaction = iota // try again later; the local deadline decides
	lost                       // lease_lost, fenced: stop writing
	regenerate                 // generation_ended, not_holder: new generation with the current token
	follow                     // misdirected: resend to holder_url
	retry                      // batch_aborted: nothing written, retry the same batch id
)

func reactionTo(err error) reaction {
	var p *Problem
	if !errors.As(err, &p) {
		return transient
	}
	switch {
	case p.Code == "lease_lost", p.Code == "fenced":
		return lost
	case p.Code == "generation_ended", p.Code == "not_holder":
		return regenerate
	case p.Code == "misdirected" && p.HolderURL != "":
		return follow
	case p.Code == "batch_aborted":
		return retry
	}
	return transient
}

// follow sends the lease's next requests to the holder a 421 named.
func (l *Lease) follow(err error) {
	var p *Problem
	if errors.As(err, &p) {
		l.mu.Lock()
		l.base = p.HolderURL
		l.mu.Unlock()
	}
}

// Record is one record to produce; nil Key or Value are absent.
type Record struct {
	Key, Value []byte
	Headers    map[string]string
}

// Result says where a committed batch is.
type Result struct {
	Token     int64   `json:"token"`
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Offsets   []int64 `json:"offsets"`
}

func encodeRecords(recs []Record) []map[string]any {
	out := make([]map[string]any, len(recs))
	for i, r := range recs {
		m := map[string]any{}
		if r.Key != nil {
			m["key"] = map[string]any{"type": "BINARY", "data": base64.StdEncoding.EncodeToString(r.Key)}
		}
		if r.Value != nil {
			m["value"] = map[string]any{"type": "BINARY", "data": base64.StdEncoding.EncodeToString(r.Value)}
		}
		if len(r.Headers) > 0 {
			m["headers"] = r.Headers
		}
		out[i] = m
	}
	return out
}

// Produce writes one batch as one transaction. batchID is the idempotency
// key: retrying it after an error never duplicates it in the ledger.
func (l *Lease) Produce(ctx context.Context, batchID string, recs []Record) (Result, error) {
	for attempt := 0; ; attempt++ {
		token, err := l.live()
		if err != nil {
			return Result{}, err
		}
		var res Result
		err = l.c.call(ctx, l.baseURL(), "POST", "/v1/leases/"+url.PathEscape(l.name)+"/records",
			map[string]any{"owner_id": l.c.cfg.Owner, "token": token, "batch_id": batchID, "records": encodeRecords(recs)}, &res)
		if err == nil || attempt > 0 {
			return res, l.classify(err)
		}
		if !l.recover(ctx, err, token) {
			return res, l.classify(err)
		}
	}
}

// recover prepares one retry: a new generation after an ambiguous commit
// or a lost session on this replica, or the holder's address after a 421.
func (l *Lease) recover(ctx context.Context, err error, token int64) bool {
	switch reactionTo(err) {
	case regenerate:
		return l.acquire(ctx, token) == nil
	case follow:
		l.follow(err)
		return true
	case retry:
		return true
	}
	return false
}

// classify marks the lease lost on the codes that say so.
func (l *Lease) classify(err error) error {
	if reactionTo(err) == lost {
		return l.markLost(err)
	}
	return err
}

// Release stops renewing and releases the lease.
func (l *Lease) Release(ctx context.Context) error {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
	g := l.Grant()
	q := url.Values{"owner_id": {l.c.cfg.Owner}, "token": {fmt.Sprint(g.Token)}}
	err := l.c.call(ctx, l.baseURL(), "DELETE", "/v1/leases/"+url.PathEscape(l.name)+"?"+q.Encode(), nil, nil)
	l.markLost(errors.New("released"))
	return err
}
