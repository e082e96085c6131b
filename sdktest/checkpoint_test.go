package sdktest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/verify"
)

// checkpointLoop is the loop of the SDK's checkpoint Example
// (client/example_test.go): AcquireWait, read the checkpoint, produce docs
// from the position it holds, each batch with the next position as its
// checkpoint, until the lease is lost; back off and start over. started
// is called after each checkpoint read with the position read, committed
// after each committed batch. It returns how many times the lease was
// lost.
func checkpointLoop(ctx context.Context, c *client.Client, name string, docs []string,
	started func(next int), committed func(i int, l *client.Lease, res client.Result)) (int, error) {
	for losses := 0; ; {
		lease, err := c.AcquireWait(ctx, name)
		if err != nil {
			return losses, err
		}
		cp, err := lease.Checkpoint(ctx)
		next := 0
		if err == nil {
			next = position(cp)
			started(next)
		}
		for err == nil && next < len(docs) {
			select {
			case <-lease.Lost():
				err = lease.Err()
			default:
				var res client.Result
				res, err = lease.Produce(ctx, "doc-"+docs[next], []client.Record{{Key: []byte(docs[next]), Value: []byte("payload")}},
					client.WithCheckpoint([]byte(strconv.Itoa(next+1))))
				if err == nil {
					committed(next, lease, res)
					next++
				}
			}
		}
		if err == nil {
			return losses, nil
		}
		if !errors.Is(err, client.ErrLeaseLost) {
			return losses, err
		}
		losses++
		select {
		case <-time.After(client.Backoff(losses, 100*time.Millisecond, 10*time.Second, 0)):
		case <-ctx.Done():
			return losses, ctx.Err()
		}
	}
}

// position is the doc index a checkpoint of checkpointLoop holds (0: none).
func position(cp *client.Checkpoint) int {
	if cp == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(cp.Value))
	return n
}

// dataByBatch counts the data records of recs by batch id (barriers and
// checkpoint records left out).
func dataByBatch(recs []verify.Record) map[string]int {
	by := map[string]int{}
	for _, r := range recs {
		if !r.Barrier && !r.Checkpoint {
			by[r.Batch]++
		}
	}
	return by
}

// TestSDKCheckpointIsTheLastCommittedBatch: through a real replica and
// ledger, a lease without checkpoints reads nil; after two checkpointed
// batches and one without, the next generation reads the second's value,
// generation, owner, batch id and the partition and offset the produce
// answered for it.
func TestSDKCheckpointIsTheLastCommittedBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runLedger()
	r := b.newReplica(nil)
	l, err := newClient(t, r.url, "w1", nil).Acquire(bg, "shard:40")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if cp, err := l.Checkpoint(ctx); err != nil || cp != nil {
		t.Fatalf("Checkpoint of a new lease: %+v, %v; want nil, nil", cp, err)
	}
	a := &acked{}
	var last client.Result
	for i, cp := range [][]byte{[]byte("1"), {0, 0xff, 0xfe}, nil} {
		id := "b-" + strconv.Itoa(i)
		var opts []client.ProduceOption
		if cp != nil {
			opts = append(opts, client.WithCheckpoint(cp))
		}
		res, err := l.Produce(bg, id, recs(2, id), opts...)
		if err != nil {
			t.Fatal(err)
		}
		a.add(l.Name(), id, res)
		if i == 1 {
			last = res
		}
	}
	g := l.Grant()
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	next, err := newClient(t, r.url, "w1", nil).Acquire(bg, "shard:40")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(bg)
	cp, err := next.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cp == nil || string(cp.Value) != "\x00\xff\xfe" || cp.Token != g.Token || cp.OwnerID != "w1" || cp.BatchID != "b-1" ||
		cp.Partition != g.Partition || cp.Offset != last.CheckpointOffset || last.CheckpointOffset <= last.Offsets[1] {
		t.Fatalf("Checkpoint %+v; want b-1's value under token %d on partition %d at %d, after its records %v",
			cp, g.Token, g.Partition, last.CheckpointOffset, last.Offsets)
	}
	if !cp.Committed("b-1") || cp.Committed("b-2") {
		t.Error("Committed: want b-1 only")
	}
	b.check(t, "shard:40", a)
}

// TestSDKCheckpointWaitsForTheLedger: while the ledger has not applied the
// generation's barrier, the read is answered ledger_behind and the SDK
// asks again until its context ends (the error carries the answer and
// the ledger's token); once a ledger runs, the same read returns.
func TestSDKCheckpointWaitsForTheLedger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	obs := &observed{}
	c := newClient(t, r.url, "w1", func(c *client.Config) { c.HTTP = &http.Client{Transport: obs} })
	l, err := c.Acquire(bg, "shard:41")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	ctx, cancel := context.WithTimeout(bg, 3*time.Second) // two reads: each waits half of what is left, then Retry-After
	defer cancel()
	_, err = l.Checkpoint(ctx)
	var p *client.Problem
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &p) || p.Code != client.CodeLedgerBehind ||
		p.Status != http.StatusServiceUnavailable || p.RetryAfter != time.Second || p.LedgerToken != 0 {
		t.Fatalf("Checkpoint without a ledger: %v; want the deadline and 503 ledger_behind, Retry-After 1s, ledger token 0", err)
	}
	if n := obs.saw("GET " + client.CodeLedgerBehind); n < 2 {
		t.Errorf("%d ledger_behind answers, want the read asked again (%v)", n, obs.all())
	}
	notLost(t, l)

	b.runLedger()
	ctx, cancel = context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if cp, err := l.Checkpoint(ctx); err != nil || cp != nil {
		t.Fatalf("Checkpoint once the ledger runs: %+v, %v; want nil, nil", cp, err)
	}
}

// TestSDKCheckpointLoopSurvivesATakeover: the checkpoint Example's loop
// against a real replica and ledger. After the worker's second batch the
// lease goes to another owner, which reads the worker's checkpoint, does
// one doc and releases; the worker sees the loss, starts over from the
// other owner's checkpoint and finishes. Every doc is in Kafka once, and
// the last checkpoint is the worker's last batch.
func TestSDKCheckpointLoopSurvivesATakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runLedger()
	r := b.newReplica(nil)
	const name = "shard:42"
	c := newClient(t, r.url, "w1", nil)
	defer c.Close(bg)
	docs := []string{"a", "b", "c", "d", "e", "f"}
	a := &acked{}
	var starts []int
	var held *client.Lease // the worker's lease at the end
	ctx, cancel := context.WithTimeout(bg, 90*time.Second)
	defer cancel()
	takeover := func(tok int64) {
		// Another process of w1 supersedes the worker's generation for a
		// second; then w2 gets the lease.
		newGeneration(t, r, name, "w1", tok, time.Second)
		l2, err := newClient(t, r.url, "w2", nil).AcquireWait(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cp, err := l2.Checkpoint(ctx)
		if err != nil || position(cp) != 2 || cp.OwnerID != "w1" || cp.BatchID != "doc-b" {
			t.Fatalf("w2's checkpoint: %+v, %v; want w1's doc-b, position 2", cp, err)
		}
		res, err := l2.Produce(ctx, "doc-c", recs(1, "doc-c"), client.WithCheckpoint([]byte("3")))
		if err != nil {
			t.Fatal(err)
		}
		a.add(name, "doc-c", res)
		if err := l2.Release(bg); err != nil {
			t.Fatal(err)
		}
	}
	losses, err := checkpointLoop(ctx, c, name, docs, func(next int) { starts = append(starts, next) },
		func(i int, l *client.Lease, res client.Result) {
			a.add(l.Name(), "doc-"+docs[i], res)
			held = l
			if i == 1 {
				takeover(res.Token)
			}
		})
	if err != nil || losses != 1 {
		t.Fatalf("checkpoint loop: %v after %d losses, want done after 1", err, losses)
	}
	if len(starts) != 2 || starts[0] != 0 || starts[1] != 3 {
		t.Fatalf("the loop started at docs %v, want 0 then 3 (w2's checkpoint)", starts)
	}
	by := dataByBatch(b.check(t, name, a))
	for _, d := range docs {
		if by["doc-"+d] != 1 {
			t.Fatalf("records by batch %v: want each doc once", by)
		}
	}
	cp, err := held.Checkpoint(ctx)
	if err != nil || position(cp) != len(docs) || !cp.Committed("doc-f") {
		t.Fatalf("the last checkpoint: %+v, %v; want w1's doc-f, position %d", cp, err, len(docs))
	}
}

// dropAnswers stands in front of r and cuts off the connection of every
// produce: after the replica answered it (landed) or before the request
// reaches it. Other requests pass.
func dropAnswers(t *testing.T, r *replica, landed bool) string {
	t.Helper()
	u, _ := url.Parse(r.url)
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/records") {
			if landed {
				proxy.ServeHTTP(httptest.NewRecorder(), req)
			}
			panic(http.ErrAbortHandler)
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSDKCheckpointSettlesALostAnswer: a batch whose every answer was
// lost (Produce returns with the outcome unknown) is settled by the
// checkpoint read of the next generation: Committed is true exactly when
// the batch landed, and its records are in Kafka exactly then.
func TestSDKCheckpointSettlesALostAnswer(t *testing.T) {
	t.Parallel()
	for _, landed := range []bool{true, false} {
		t.Run("landed="+strconv.FormatBool(landed), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.runLedger()
			r := b.newReplica(nil)
			name := "shard:43"
			cut := newClient(t, dropAnswers(t, r, landed), "w1", nil)
			l, err := cut.Acquire(bg, name)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(bg, time.Second)
			defer cancel()
			_, err = l.Produce(ctx, "b-1", recs(2, "b-1"), client.WithCheckpoint([]byte("1")))
			if !errors.Is(err, client.ErrOutcomeUnknown) {
				t.Fatalf("Produce with its answers cut off: %v, want the outcome unknown", err)
			}
			if err := l.Release(bg); err != nil {
				t.Fatal(err)
			}
			again, err := newClient(t, r.url, "w1", nil).Acquire(bg, name)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Release(bg)
			ctx, cancel = context.WithTimeout(bg, 30*time.Second)
			defer cancel()
			cp, err := again.Checkpoint(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if cp.Committed("b-1") != landed || (landed && string(cp.Value) != "1") || (!landed && cp != nil) {
				t.Fatalf("checkpoint after the next acquire: %+v; want b-1's: %v", cp, landed)
			}
			want := 0
			if landed {
				want = 2
			}
			if n := dataByBatch(b.check(t, name, &acked{}))["b-1"]; n != want {
				t.Fatalf("%d records of b-1 in Kafka, want %d", n, want)
			}
		})
	}
}
