package loadtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	sdk "github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/client/wire"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/verify"
)

// client speaks the gateway's v1 API. Lease calls (acquire, renew,
// release) have their own connections: with one pool, a renewal waited for
// a connection behind the batches in flight (the pool is capped), and the
// harness measured its own queue as renewal latency. A worker using the SDK
// has no such cap.
type client struct {
	base    string
	token   string
	http    *http.Client // batches
	control *http.Client // lease calls
}

func newClient(base, token string, conns int) *client {
	if token == "" {
		token = stack.WorkerToken
	}
	pool := func() *http.Client {
		return &http.Client{Timeout: 30 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
	}
	return &client{base: base, token: token, http: pool(), control: pool()}
}

// reply is an HTTP answer: its status, the problem of an error reply in
// the SDK's type (whose ProduceOutcome classifies it), and the body of a
// success.
type reply struct {
	status int
	// problem is the decoded problem document of a 4xx or 5xx, with its
	// Retry-After; zero for a success and for no answer.
	problem sdk.Problem
	body    []byte // a success's body
	// transport is why a request got no answer (status 0).
	transport string
}

// decode reads a success's body into v; a body that does not decode
// leaves v as it is.
func (r reply) decode(v any) { _ = json.Unmarshal(r.body, v) }

// do sends one request. The end of a run stops the loops, not the requests
// in flight: each finishes (bounded by the client timeout) so that no batch
// is cut off half-way by the harness itself.
func (c *client) do(ctx context.Context, method, path string, body []byte) reply {
	return c.roundTrip(ctx, c.control, method, path, "application/json", body)
}

// send posts a batch.
func (c *client) send(ctx context.Context, method, path, contentType string, body []byte) reply {
	return c.roundTrip(ctx, c.http, method, path, contentType, body)
}

func (c *client) roundTrip(ctx context.Context, hc *http.Client, method, path, contentType string, body []byte) reply {
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return reply{transport: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", contentType)
	resp, err := hc.Do(req)
	if err != nil {
		return reply{transport: err.Error()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := reply{status: resp.StatusCode}
	if resp.StatusCode < 400 {
		out.body = raw
		return out
	}
	_ = json.Unmarshal(raw, &out.problem)
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		out.problem.RetryAfter = time.Duration(secs) * time.Second
	}
	return out
}

func jsonBody(v any) []byte { raw, _ := json.Marshal(v); return raw }

// worker is one contender for one lease.
type worker struct {
	id      string
	lease   string
	r       *runner
	api     int                    // its API client: an index of the stack's tokens
	gw      atomic.Pointer[client] // the replica it talks to (it follows 421s)
	held    atomic.Int64           // the token it holds, for the fault injectors
	token   int64
	owned   atomic.Bool
	renewed time.Time
	seq     int
	pending string // batch id to retry after an aborted or ambiguous batch
	// deferrals counts the acquires answered 429 in a row (the SDK's
	// backoff grows with them).
	deferrals int
	freeze    atomic.Bool
	churn     atomic.Bool
	// items is a stateful worker's position (Scenario.Stateful).
	items itemState
}

func (w *worker) run(ctx context.Context) {
	next := time.Now() // when the next batch is due
	for ctx.Err() == nil {
		if !w.owned.Load() {
			w.acquire(ctx)
			continue
		}
		renewDue := w.renewed.Add(w.r.sc.RenewEvery)
		switch {
		case w.freeze.Swap(false):
			w.frozen(ctx)
		case w.churn.Swap(false):
			w.release(ctx)
		case !time.Now().Before(renewDue):
			w.renew(ctx)
		case time.Now().Before(next):
			// Paced: sleep until the batch is due, but never past a renewal
			// or a fault's check.
			wait(ctx, min(time.Until(next), time.Until(renewDue), w.r.flagPoll()))
		default:
			w.produce(ctx)
			next = w.r.nextBatch(next)
		}
	}
	if w.owned.Load() {
		w.release(context.WithoutCancel(ctx))
	}
}

func (w *worker) acquire(ctx context.Context) {
	start := time.Now()
	rep := w.gw.Load().do(ctx, "POST", "/v1/leases", jsonBody(map[string]any{
		"name": w.lease, "owner_id": w.id, "ttl_ms": w.r.sc.TTL.Milliseconds()}))
	if rep.status == http.StatusCreated {
		w.deferrals = 0
		w.took(rep, start)
		return
	}
	if w.rehome(rep) {
		return
	}
	if rep.problem.Code == sdk.CodeTooManyRequests {
		// The gateway deferred the acquire (its handover queue is full):
		// not a failure; come back when the SDK would.
		w.r.st.deferred.Add(1)
		w.deferrals++
		wait(ctx, sdkBackoff(w.deferrals, rep.problem.RetryAfter))
		return
	}
	w.deferrals = 0
	if rep.problem.Code != sdk.CodeLeaseHeld && ctx.Err() == nil {
		w.r.st.error("acquire", rep)
	}
	wait(ctx, w.r.sc.TTL/4)
}

// rehome moves the worker to another replica when its replica is draining
// or gone (what a load balancer does for it), and reports whether it did.
func (w *worker) rehome(rep reply) bool {
	urls := w.r.stack.URLs()
	if (rep.problem.Code != sdk.CodeDraining && rep.status != 0) || len(urls) < 2 {
		return false
	}
	cur := w.gw.Load().base
	for i, u := range urls {
		if u == cur {
			w.gw.Store(w.r.client(urls[(i+1)%len(urls)], w.api))
			w.r.st.rehomes.Add(1)
			return true
		}
	}
	w.gw.Store(w.r.client(urls[0], w.api))
	w.r.st.rehomes.Add(1)
	return true
}

// took installs an acknowledged generation.
func (w *worker) took(rep reply, start time.Time) {
	var g struct {
		Token int64 `json:"token"`
	}
	rep.decode(&g)
	w.token, w.renewed = g.Token, start
	w.items.newGeneration(start)
	w.held.Store(w.token)
	w.owned.Store(true)
	w.r.st.grant(Grant{Lease: w.lease, Token: w.token, AckAt: time.Now()}, time.Since(start))
}

// regenerate asks for a new generation with the current token.
func (w *worker) regenerate(ctx context.Context) bool {
	start := time.Now()
	for range 2 {
		rep := w.gw.Load().do(ctx, "POST", "/v1/leases", jsonBody(map[string]any{
			"name": w.lease, "owner_id": w.id, "ttl_ms": w.r.sc.TTL.Milliseconds(), "token": w.token}))
		if rep.status == http.StatusCreated {
			w.took(rep, start)
			return true
		}
		if !w.rehome(rep) {
			break // a draining or gone replica: once more on another
		}
	}
	w.owned.Store(false)
	return false
}

func (w *worker) renew(ctx context.Context) {
	start := time.Now()
	rep := w.gw.Load().do(ctx, "PATCH", "/v1/leases/"+w.lease, jsonBody(map[string]any{
		"owner_id": w.id, "token": w.token, "ttl_ms": w.r.sc.TTL.Milliseconds()}))
	switch {
	case rep.status == http.StatusOK:
		w.r.st.renewed(time.Since(start))
		w.renewed = start
	case rep.problem.Code == sdk.CodeNotHolder:
		w.regenerate(ctx)
	case rep.problem.Code == sdk.CodeMisdirected:
		w.follow(rep)
	case rep.status == http.StatusConflict:
		w.owned.Store(false)
	case w.rehome(rep):
		w.regenerate(ctx) // the session's replica is gone: move the lease
	default:
		w.r.st.error("renew", rep)
		if time.Since(w.renewed) > w.r.sc.TTL {
			w.owned.Store(false) // fail closed: our view of the lease has expired
		}
	}
}

func (w *worker) release(ctx context.Context) {
	w.gw.Load().do(ctx, "DELETE", fmt.Sprintf("/v1/leases/%s?owner_id=%s&token=%d", w.lease, w.id, w.token), nil)
	w.owned.Store(false)
	wait(ctx, w.r.sc.TTL/10) // let a contender take it
}

// follow sends the worker to the replica a 421 named.
func (w *worker) follow(rep reply) {
	if url := rep.problem.HolderURL; url != "" {
		w.gw.Store(w.r.client(url, w.api))
	}
}

// batchBody is one attempt at a batch. Each record's key carries the
// attempt's id, so that the log read afterwards says whether this very
// attempt was committed, whatever it was answered.
func (w *worker) batchBody(batch, attempt string) (contentType string, body []byte) {
	if w.r.sc.Body == BodyBinary {
		recs := make([]wire.Record, w.r.sc.BatchSize)
		for i := range recs {
			recs[i] = wire.Record{Key: []byte(attempt + "/" + strconv.Itoa(i)), Value: w.r.value}
		}
		b := wire.Batch{OwnerID: w.id, Token: w.token, BatchID: batch, Records: recs}
		return wire.ContentType, wire.Append(make([]byte, 0, wire.Size(b)), b)
	}
	recs := make([]map[string]any, w.r.sc.BatchSize)
	val := map[string]any{"type": "BINARY", "data": base64.StdEncoding.EncodeToString(w.r.value)}
	for i := range recs {
		recs[i] = map[string]any{"key": map[string]any{"type": "STRING", "data": attempt + "/" + strconv.Itoa(i)}, "value": val}
	}
	return "application/json", jsonBody(map[string]any{"owner_id": w.id, "token": w.token, "batch_id": batch, "records": recs})
}

// send makes one produce attempt and records its answer.
func (w *worker) send(ctx context.Context, batch string) reply {
	attempt := w.r.st.nextAttempt()
	staleAtSend := w.r.st.latestGrant(w.lease) > w.token
	ct, body := w.batchBody(batch, attempt)
	rep := w.gw.Load().send(ctx, "POST", "/v1/leases/"+w.lease+"/records", ct, body)
	w.r.st.answer(attempt, w.r.partition(w.lease), verify.Op{Lease: w.lease, Token: w.token, BatchID: batch, Records: w.r.sc.BatchSize}, rep,
		staleAtSend, w.r.st.latestGrant(w.lease) > w.token)
	return rep
}

func (w *worker) produce(ctx context.Context) {
	if w.r.sc.Stateful {
		w.produceItems(ctx)
		return
	}
	batch := w.pending
	if batch == "" {
		w.seq++
		batch = fmt.Sprintf("%s/%d", w.id, w.seq)
	}
	start := time.Now()
	rep := w.send(ctx, batch)
	w.pending = ""
	switch {
	case rep.status == http.StatusOK:
		var acked struct {
			Offsets []int64 `json:"offsets"`
		}
		rep.decode(&acked)
		offs := acked.Offsets
		w.r.st.batch(AckedBatch{Lease: w.lease, Owner: w.id, Token: w.token, BatchID: batch, Offsets: offs, At: time.Now()}, len(offs), time.Since(start))
	case rep.problem.Code == sdk.CodeGenerationEnded, rep.problem.Code == sdk.CodeNotHolder:
		w.pending = batch // same batch_id under the next generation
		w.regenerate(ctx)
	case rep.problem.Code == sdk.CodeMisdirected:
		w.pending = batch
		w.follow(rep)
	case rep.problem.Code == sdk.CodeBatchAborted:
		w.pending = batch
	case rep.problem.Code == sdk.CodeFenced, rep.problem.Code == sdk.CodeLeaseLost:
		w.owned.Store(false)
	case w.rehome(rep):
		w.pending = batch // outcome unknown: the same batch_id under a new generation
		w.regenerate(ctx)
	case ctx.Err() == nil:
		w.r.st.error("produce", rep)
		w.pending = batch
	}
}

// frozen is the incident: stop renewing, sleep past the TTL while another
// worker takes the lease, wake up and write with the old token.
func (w *worker) frozen(ctx context.Context) {
	w.r.frozenWorkers.Add(1)
	defer w.r.frozenWorkers.Add(-1)
	old := w.token
	wait(ctx, w.r.sc.TTL+w.r.sc.TTL/2)
	deadline := time.Now().Add(3 * w.r.sc.TTL)
	for ctx.Err() == nil && w.r.st.latestGrant(w.lease) <= old && time.Now().Before(deadline) {
		wait(ctx, w.r.sc.TTL/10)
	}
	if ctx.Err() != nil {
		return
	}
	if w.r.sc.Stateful {
		w.frozenItems(ctx, old)
	} else {
		w.send(ctx, fmt.Sprintf("%s/stale-%d", w.id, old))
	}
	w.owned.Store(false)
}

// flagPoll is how long a paced worker sleeps at most before it looks at
// its fault flags again (freeze, churn). With those faults off it sleeps
// until its batch or its renewal is due: thousands of paced workers waking
// ten times a second each would cost the harness a share of the cores it
// shares with the gateways it measures.
func (r *runner) flagPoll() time.Duration {
	if r.sc.FreezeEvery > 0 || r.sc.ChurnEvery > 0 {
		return 100 * time.Millisecond
	}
	return time.Hour
}

// wait pauses for d or until ctx ends; the harness paces load, it does not
// wait for events this way.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func recordValue(size int) []byte { return bytes.Repeat([]byte("x"), size) }

// sdkBackoff is the wait of an SDK worker with the default bounds before
// retry n (1, 2, ...): workers that retry deferred acquires as SDK workers
// do spread their retries instead of coming back together.
func sdkBackoff(n int, retryAfter time.Duration) time.Duration {
	return sdk.Backoff(n, sdk.DefaultMinBackoff, sdk.DefaultMaxBackoff, retryAfter)
}
