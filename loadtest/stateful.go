package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	sdk "github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/client/wire"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/verify"
)

// A stateful worker (Scenario.Stateful) processes its lease's input
// sequence: item 0, 1, 2, ... Its position is the lease's checkpoint, read
// after every new generation; each batch carries items i..j (record value
// "item-<i>", padded to the record size) and the checkpoint j+1 in the same transaction, under the
// batch id items-<i>-<j>, so the position and the output can never part.
// An answer that leaves the commit unknown ends the generation: the next
// one reads the checkpoint, which says whether the batch landed.

// statefulEntry is the stateful scenario of the table.
func statefulEntry() entry {
	return entry{name: "stateful", proves: "workers resuming from the lease's checkpoint process each item once, in order (I6), and so does their own fenced table; the naive baseline runs stateful",
		flags: []string{"--stateful"}, httpWorkers: true,
		on: func(sc Scenario, _ *stack.Stack) bool { return sc.Stateful },
		needs: func(_ Scenario, s *stack.Stack) error {
			if !s.Materialize {
				return errors.New("stateful needs the materializer: I6 reads the ledger")
			}
			return nil
		},
		prepare: func(ctx context.Context, r *runner) (err error) {
			if r.stack.Pool != nil {
				r.fenced, err = newFencedState(ctx, r.stack.Pool)
			}
			return err
		},
		check:  func(ctx context.Context, r *runner, rep *report.Report) error { return r.checkI6(ctx, rep) },
		report: "stateful"}
}

// itemState is a stateful worker's position.
type itemState struct {
	// next is the next item to send; valid only when !resync.
	next int
	// resync: a new generation began at since; read the checkpoint
	// before sending.
	resync bool
	since  time.Time
	// ambiguous is the batch whose outcome is unknown (nil: none).
	ambiguous *itemRange
	// lastOwner is the owner of the checkpoint the worker last resumed
	// from, or its own id once it wrote: resuming from a checkpoint of
	// another owner counts as resuming from another's work.
	lastOwner string
}

// newGeneration marks a generation acquired at start: it resumes from the
// checkpoint.
func (s *itemState) newGeneration(start time.Time) { s.resync, s.since = true, start }

// itemRange is items first..last of a batch.
type itemRange struct{ first, last int }

// itemStats are the stateful workers' counts over the gateway phase.
type itemStats struct {
	resumes, fromOther, ledgerBehind                    atomic.Int64
	ambiguousLanded, ambiguousNotLanded, ambiguousTaken atomic.Int64
	staleBatches                                        atomic.Int64
	// resumeWait is from a generation's acquire to its checkpoint read's
	// answer (the ledger catching up with the barrier included).
	resumeWait report.Histogram
}

// itemValue is item i's record value, "item-<i>" padded with '.' to size
// bytes (the scenario's record size); itemIndex parses it back.
func itemValue(i, size int) []byte {
	v := []byte("item-" + strconv.Itoa(i))
	for len(v) < size {
		v = append(v, '.')
	}
	return v
}

func itemIndex(v []byte) (int, bool) {
	digits, ok := bytes.CutPrefix(v, []byte("item-"))
	if !ok {
		return 0, false
	}
	if end := bytes.IndexByte(digits, '.'); end >= 0 {
		digits = digits[:end]
	}
	i, err := strconv.Atoi(string(digits))
	return i, err == nil && i >= 0
}

// itemBatchID names the batch of items r: the same input, the same id,
// whichever generation sends it (a retry dedups in the ledger).
func itemBatchID(r itemRange) string { return fmt.Sprintf("items-%d-%d", r.first, r.last) }

// itemBody is one attempt at the batch of items r under token, with the
// checkpoint r.last+1. Keys carry the attempt's id, as batchBody's.
func (w *worker) itemBody(r itemRange, token int64, attempt string) (contentType string, body []byte) {
	cp := strconv.Itoa(r.last + 1)
	if w.r.sc.Body == BodyBinary {
		var recs []wire.Record
		for i := r.first; i <= r.last; i++ {
			recs = append(recs, wire.Record{Key: []byte(attempt + "/" + strconv.Itoa(i-r.first)), Value: itemValue(i, w.r.sc.RecordSize)})
		}
		b := wire.Batch{OwnerID: w.id, Token: token, BatchID: itemBatchID(r), Records: recs, Checkpoint: []byte(cp)}
		return wire.ContentType, wire.Append(make([]byte, 0, wire.Size(b)), b)
	}
	var recs []map[string]any
	for i := r.first; i <= r.last; i++ {
		recs = append(recs, map[string]any{"key": map[string]any{"type": "STRING", "data": attempt + "/" + strconv.Itoa(i-r.first)},
			"value": map[string]any{"type": "STRING", "data": string(itemValue(i, w.r.sc.RecordSize))}})
	}
	return "application/json", jsonBody(map[string]any{"owner_id": w.id, "token": token, "batch_id": itemBatchID(r),
		"records": recs, "checkpoint": map[string]any{"type": "STRING", "data": cp}})
}

// sendItems makes one produce attempt of items r under token.
func (w *worker) sendItems(ctx context.Context, r itemRange, token int64) reply {
	attempt := w.r.st.nextAttempt()
	staleAtSend := w.r.st.latestGrant(w.lease) > token
	ct, body := w.itemBody(r, token, attempt)
	rep := w.gw.Load().send(ctx, "POST", "/v1/leases/"+w.lease+"/records", ct, body)
	w.r.st.answer(attempt, w.r.partition(w.lease), verify.Op{Lease: w.lease, Token: token, BatchID: itemBatchID(r), Records: r.last - r.first + 1}, rep,
		staleAtSend, w.r.st.latestGrant(w.lease) > token)
	return rep
}

// produceItems sends the next batch of items, reading the checkpoint first
// when a new generation began.
func (w *worker) produceItems(ctx context.Context) {
	if w.items.resync && !w.resume(ctx) {
		return
	}
	r := itemRange{w.items.next, w.items.next + w.r.sc.BatchSize - 1}
	start := time.Now()
	rep := w.sendItems(ctx, r, w.token)
	switch {
	case rep.status == http.StatusOK:
		var acked struct {
			Offsets []int64 `json:"offsets"`
		}
		rep.decode(&acked)
		w.items.next, w.items.lastOwner = r.last+1, w.id
		w.r.fenced.record(ctx, w.lease, w.id, w.token, r.last+1)
		w.r.st.batch(AckedBatch{Lease: w.lease, Owner: w.id, Token: w.token, BatchID: itemBatchID(r), Offsets: acked.Offsets, At: time.Now()},
			len(acked.Offsets), time.Since(start))
	case rep.problem.Code == sdk.CodeBatchAborted, rep.problem.Code == sdk.CodeMisdirected:
		// Definite: nothing of it committed; send it again (at the
		// replica a 421 named).
		w.follow(rep)
	case rep.problem.Code == sdk.CodeFenced, rep.problem.Code == sdk.CodeLeaseLost:
		w.owned.Store(false) // a takeover: the next generation reads the checkpoint
	default:
		// Unknown outcome (generation ended, not holder, no answer, a
		// replica gone): a new generation, whose checkpoint says.
		if ctx.Err() == nil && rep.problem.Code != sdk.CodeGenerationEnded && rep.problem.Code != sdk.CodeNotHolder &&
			rep.problem.Code != sdk.CodeDraining && rep.status != 0 {
			w.r.st.error("produce", rep)
		}
		w.items.ambiguous = &r
		w.rehome(rep)
		w.regenerate(ctx)
	}
}

// checkpointAnswer is the part of GET /v1/leases/{name}/checkpoint's
// answer a worker reads.
type checkpointAnswer struct {
	Checkpoint *struct {
		OwnerID string     `json:"owner_id"`
		BatchID string     `json:"batch_id"`
		Value   typedValue `json:"value"`
	} `json:"checkpoint"`
}

// typedValue is a checkpoint's value in the answer: in the type it was
// written as (this worker writes STRING), BINARY as base64.
type typedValue struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// bytes are the bytes v stands for.
func (v typedValue) bytes() ([]byte, error) {
	switch v.Type {
	case "STRING":
		var s string
		err := json.Unmarshal(v.Data, &s)
		return []byte(s), err
	case "BINARY":
		var b []byte
		err := json.Unmarshal(v.Data, &b)
		return b, err
	case "JSON":
		return v.Data, nil
	}
	return nil, fmt.Errorf("checkpoint value of type %q", v.Type)
}

// resume reads the lease's checkpoint under the current generation (final
// for every earlier one) and moves the position to it; it reports whether
// the worker may send. A ledger behind the barrier answers 503
// ledger_behind: the worker keeps its generation, renews it meanwhile (the
// read waits less than the renewal interval) and asks again.
func (w *worker) resume(ctx context.Context) bool {
	path := fmt.Sprintf("/v1/leases/%s/checkpoint?owner_id=%s&token=%d&wait=%s", w.lease, url.QueryEscape(w.id), w.token,
		w.r.checkpointWait())
	rep := w.gw.Load().do(ctx, "GET", path, nil)
	switch {
	case rep.status == http.StatusOK:
		var a checkpointAnswer
		if err := json.Unmarshal(rep.body, &a); err != nil {
			w.r.st.error("checkpoint", rep)
			w.owned.Store(false)
			return false
		}
		return w.resumeAt(a)
	case rep.problem.Code == sdk.CodeLedgerBehind:
		w.r.items.ledgerBehind.Add(1)
	case rep.status == 0 || rep.problem.Code == sdk.CodeDraining:
		w.rehome(rep)
		w.owned.Store(false) // its session may be gone with its replica
	default:
		if rep.problem.Code != sdk.CodeLeaseLost && ctx.Err() == nil {
			w.r.st.error("checkpoint", rep)
		}
		w.owned.Store(false)
	}
	return false
}

// checkpointWait is how long a checkpoint read may wait for the ledger:
// half the renewal interval, so that a holder waiting renews in time.
func (r *runner) checkpointWait() time.Duration {
	return min(r.sc.RenewEvery/2, 5*time.Second).Truncate(time.Millisecond)
}

// resumeAt installs the checkpoint of answer a as the position and
// resolves a pending ambiguous batch by it.
func (w *worker) resumeAt(a checkpointAnswer) bool {
	next, owner, batch := 0, "", ""
	if cp := a.Checkpoint; cp != nil {
		raw, err := cp.Value.bytes()
		if err != nil {
			w.r.st.error("checkpoint value", reply{})
			w.owned.Store(false)
			return false
		}
		n, err := strconv.Atoi(string(raw))
		if err != nil || n < 0 {
			w.r.st.error("checkpoint value", reply{})
			w.owned.Store(false)
			return false
		}
		next, owner, batch = n, cp.OwnerID, cp.BatchID
	}
	st := w.r.items
	st.resumes.Add(1)
	st.resumeWait.Record(time.Since(w.items.since))
	if owner != w.items.lastOwner && (owner != "" || w.items.lastOwner != "") {
		st.fromOther.Add(1)
	}
	if amb := w.items.ambiguous; amb != nil {
		switch {
		case owner == w.id && batch == itemBatchID(*amb):
			st.ambiguousLanded.Add(1)
		case next == amb.first:
			st.ambiguousNotLanded.Add(1)
		default:
			st.ambiguousTaken.Add(1)
		}
	}
	w.items = itemState{next: next, lastOwner: owner}
	return true
}

// frozenItems is a frozen stateful worker's write after waking: its next
// batch, under its overtaken token, from its stale position.
func (w *worker) frozenItems(ctx context.Context, old int64) {
	w.r.items.staleBatches.Add(1)
	next := w.items.next
	w.sendItems(ctx, itemRange{next, next + w.r.sc.BatchSize - 1}, old)
	// And its own table, as a naive worker would write it on waking: the
	// fence refuses it once a later generation wrote the lease's row.
	w.r.fenced.record(ctx, w.lease, w.id, old, next)
}
