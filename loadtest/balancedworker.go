package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/client/wire"
	"github.com/fencegate/fencegate/verify"
)

// A balanced run (a load balancer in front of the replicas) drives them
// with workers on the Go SDK, as a real worker would: the balancer's
// address is their BaseURL, and the SDK's own reactions (follow a 421,
// come back to BaseURL when a replica drains or does not answer, ask for
// a new generation, retry a batch under its batch id) are what is tested.
// What the SDK returns to a worker is counted as worker-visible: every
// Produce or AcquireWait call that failed back (the SDK retried what it
// could first), and every lease lost while held. The goal is none.
//
// The SDK's requests pass through observer, which sees each exchange: the
// grants (I4), the renewals, and every produce attempt with its answer.
// It gives each attempt's records keys of their own (attempt/index), as
// the harness's own workers do, so that the log read afterwards says
// whether this very attempt was committed, whatever it was answered.

// sdkWorker is one SDK worker of one lease.
type sdkWorker struct {
	id    string
	lease string
	r     *runner
	c     *sdk.Client
	seq   int
	recs  []sdk.Record
}

// produceBound bounds one Produce call of an SDK worker, its retries
// included: a batch not committed within a TTL is failed back to the
// worker (a worker-visible error), whose lease's local deadline has
// passed by then anyway.
func (r *runner) produceBound() time.Duration { return r.sc.TTL }

// startSDKWorkers starts WorkersPerLease SDK workers for each lease, each
// a client of its own (its owner id), all on one HTTP transport.
func (r *runner) startSDKWorkers(ctx context.Context, wg *sync.WaitGroup) error {
	tokens := r.stack.WorkerTokens()
	conns := r.sc.Leases*r.sc.WorkersPerLease*2 + 16
	hc := &http.Client{Transport: &observer{r: r, next: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns}}}
	recs := make([]sdk.Record, r.sc.BatchSize)
	for i := range recs {
		recs[i] = sdk.Record{Key: []byte("k"), Value: r.value} // the observer gives each attempt its keys
	}
	var ws []*sdkWorker
	for l := range r.sc.Leases {
		for i := range r.sc.WorkersPerLease {
			id := fmt.Sprintf("w%d-%d", l, i)
			c, err := sdk.New(sdk.Config{BaseURL: r.stack.BalancerURL, Token: tokens[(l*r.sc.WorkersPerLease+i)%len(tokens)],
				Owner: id, TTL: r.sc.TTL, RenewEvery: r.sc.RenewEvery, HTTP: hc})
			if err != nil {
				return err
			}
			ws = append(ws, &sdkWorker{id: id, lease: leaseName(l), r: r, c: c, recs: recs})
		}
	}
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
	return nil
}

// run acquires the lease and produces under it until ctx ends, again
// after each loss; at the end it releases (Close).
func (w *sdkWorker) run(ctx context.Context) {
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = w.c.Close(cctx)
	}()
	for ctx.Err() == nil {
		lease, err := w.c.AcquireWait(ctx, w.lease)
		if err != nil {
			if ctx.Err() == nil {
				w.r.bal.visible("acquire", w.lease, err)
				wait(ctx, w.r.sc.TTL/4)
			}
			continue
		}
		w.hold(ctx, lease)
	}
}

// hold produces batches under lease until ctx ends or the lease is lost.
// A batch whose Produce failed back is sent again under the same batch id
// (the SDK's rule: never twice in the ledger).
func (w *sdkWorker) hold(ctx context.Context, lease *sdk.Lease) {
	next, pending := time.Now(), ""
	for ctx.Err() == nil {
		select {
		case <-lease.Lost():
			w.r.bal.visible("lost", w.lease, lease.Err())
			return
		default:
		}
		if d := time.Until(next); d > 0 {
			wait(ctx, d)
			continue
		}
		batch := pending
		if batch == "" {
			w.seq++
			batch = fmt.Sprintf("%s/%d", w.id, w.seq)
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.r.produceBound())
		start := time.Now()
		res, err := lease.Produce(pctx, batch, w.recs)
		cancel()
		if err == nil {
			pending = ""
			w.r.st.batch(AckedBatch{Lease: w.lease, Owner: w.id, Token: res.Token, BatchID: batch, Offsets: res.Offsets, At: time.Now()},
				len(res.Offsets), time.Since(start))
			next = w.r.nextBatch(next)
			continue
		}
		pending = batch
		if errors.Is(err, sdk.ErrLeaseLost) {
			w.r.bal.visible("lost", w.lease, err)
			return
		}
		w.r.bal.visible("produce", w.lease, err)
	}
}

// visibleCode names a worker-visible error by its answer: the problem
// code, the loss's cause, a deadline, or transport.
func visibleCode(err error) string {
	switch {
	case errors.Is(err, sdk.ErrDeadlinePassed):
		return "deadline_passed"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case sdk.ErrorCode(err) != "":
		return sdk.ErrorCode(err)
	}
	return "transport"
}

// observer is the SDK workers' transport: it records grants, renewals and
// produce attempts (giving each attempt's records their keys) as they
// pass to next.
type observer struct {
	r    *runner
	next http.RoundTripper
}

func (o *observer) RoundTrip(req *http.Request) (*http.Response, error) {
	p := req.URL.Path
	switch {
	case req.Method == http.MethodPost && strings.HasSuffix(p, "/records"):
		return o.produce(req)
	case req.Method == http.MethodPost && strings.HasSuffix(p, "/v1/leases"):
		return o.timed(req, http.StatusCreated, o.granted)
	case req.Method == http.MethodPatch:
		return o.timed(req, http.StatusOK, func(_ []byte, took time.Duration) { o.r.st.renewed(took) })
	}
	return o.next.RoundTrip(req)
}

// timed sends req and, when answered want, calls done with the body and
// the latency.
func (o *observer) timed(req *http.Request, want int, done func([]byte, time.Duration)) (*http.Response, error) {
	start := time.Now()
	resp, raw, err := o.send(req)
	if err != nil || resp.StatusCode != want {
		return resp, err
	}
	done(raw, time.Since(start))
	return resp, nil
}

// granted records a generation the gateway acknowledged (201).
func (o *observer) granted(raw []byte, took time.Duration) {
	var g sdk.Grant
	if json.Unmarshal(raw, &g) == nil {
		o.r.st.grant(Grant{Lease: g.Name, Token: g.Token, AckAt: time.Now()}, took)
	}
}

// send passes req on and reads the whole answer, which it puts back for
// the SDK.
func (o *observer) send(req *http.Request) (*http.Response, []byte, error) {
	resp, err := o.next.RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	return resp, raw, nil
}

// produce gives the attempt's records their keys, sends it, and records
// its answer as the harness's workers do (answer).
func (o *observer) produce(req *http.Request) (*http.Response, error) {
	lease, _ := url.PathUnescape(strings.TrimSuffix(strings.TrimPrefix(req.URL.EscapedPath(), "/v1/leases/"), "/records"))
	raw, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	b, err := wire.Decode(raw, wire.Limits{Records: 1 << 20, Headers: 64, HeaderBytes: 1 << 20, Checkpoint: 1 << 20})
	if err != nil {
		return nil, fmt.Errorf("loadtest: the SDK sent a batch the harness cannot decode: %w", err)
	}
	attempt := o.r.st.nextAttempt()
	for i := range b.Records {
		b.Records[i].Key = []byte(attempt + "/" + strconv.Itoa(i))
	}
	body := wire.Append(make([]byte, 0, wire.Size(b)), b)
	out := req.Clone(req.Context())
	out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	staleAtSend := o.r.st.latestGrant(lease) > b.Token
	resp, answer, err := o.send(out)
	rep := reply{}
	if err != nil {
		rep.transport = err.Error()
	} else {
		rep.status, rep.body = resp.StatusCode, answer
		if rep.status >= 400 {
			_ = json.Unmarshal(answer, &rep.problem)
		}
	}
	o.r.st.answer(attempt, o.r.partition(lease), verify.Op{Lease: lease, Token: b.Token, BatchID: b.BatchID, Records: len(b.Records)}, rep,
		staleAtSend, o.r.st.latestGrant(lease) > b.Token)
	return resp, err
}
