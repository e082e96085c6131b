package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// CheckpointAnswer is the reply to a checkpoint read: the lease, the
// caller's token, and the lease's latest checkpoint in the ledger (nil:
// none).
type CheckpointAnswer struct {
	Name       string          `json:"name"`
	Token      int64           `json:"token"`
	Checkpoint *CheckpointView `json:"checkpoint"`
}

// CheckpointView is the ledger's row of a lease's checkpoint: the batch
// that carried it and where its record is.
type CheckpointView struct {
	Token     int64      `json:"token"`
	OwnerID   string     `json:"owner_id"`
	BatchID   string     `json:"batch_id"`
	Partition int32      `json:"partition"`
	Offset    int64      `json:"offset"`
	Value     TypedValue `json:"value"`
}

// TypedValue is a value in the typed encoding of records: {"type":
// "BINARY", "data": base64}, {"type": "STRING", "data": text} or
// {"type": "JSON", "data": any JSON}. A checkpoint is answered in the type
// it was written as (typedValue).
type TypedValue struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// typedValue is value, kept as type kind, in the typed encoding: what
// goes in comes out. A value that is not what its type says (it cannot
// be, the gateway checked it on the way in) is answered BINARY rather
// than as a document that does not parse.
func typedValue(kind string, value []byte) TypedValue {
	switch {
	case kind == "STRING" && utf8.Valid(value):
		data, err := json.Marshal(string(value))
		if err == nil {
			return TypedValue{Type: kind, Data: data}
		}
	case kind == "JSON" && json.Valid(value):
		return TypedValue{Type: kind, Data: value}
	}
	if value == nil {
		value = []byte{} // an empty checkpoint: "", not null
	}
	data, _ := json.Marshal(value) // []byte marshals as a base64 string
	return TypedValue{Type: "BINARY", Data: data}
}

// Checkpoint waits, at most wait, until the ledger has applied the
// caller's barrier (its fence for the lease on the lease's partition is at
// token or above) and, for a lease that moved when its route grew, its
// earlier partitions up to their last stable offset (FM82), and answers
// the lease's checkpoint then, final for every earlier generation
// (docs/design.md, "Checkpoints"). The caller's
// generation must be the lease's current, active, unexpired one in
// Postgres (else lease_lost), before the wait and again after the read,
// and caller must be allowed to act for its client. Past wait: 503
// ledger_behind, nothing changed.
func (g *Gateway) Checkpoint(ctx context.Context, caller *Client, name, owner string, token int64, wait time.Duration) (CheckpointAnswer, error) {
	ctx, span := g.tracer.Start(ctx, "fencegate.checkpoint", trace.WithAttributes(attrLease.String(name), attrToken.Int64(token)))
	defer span.End()
	res, err := g.checkpoint(ctx, caller, name, owner, token, wait)
	return res, spanError(span, err)
}

func (g *Gateway) checkpoint(ctx context.Context, caller *Client, name, owner string, token int64, wait time.Duration) (CheckpointAnswer, error) {
	if g.cfg.Ledger == nil {
		return CheckpointAnswer{}, errorf(CodeStoreUnavailable, "this replica has no ledger database to read")
	}
	if err := g.current(ctx, caller, name, owner, token); err != nil {
		return CheckpointAnswer{}, err
	}
	place, err := g.router.Resolve(name)
	if err != nil {
		return CheckpointAnswer{}, err
	}
	moved, err := g.movedFrom(ctx, name, place)
	if err != nil {
		return CheckpointAnswer{}, err
	}
	deadline := time.Now().Add(wait)
	for pause := ledgerPollFirst; ; pause = min(2*pause, ledgerPollMax) {
		// The earlier partitions first, then the row: applied up to their
		// marks before the row is read, they are in it.
		applied, err := appliedTo(ctx, g.cfg.Ledger, moved)
		fence, cp, rerr := readCheckpoint(ctx, g.cfg.Ledger, name, place.Partition)
		switch {
		case err != nil || rerr != nil:
			return CheckpointAnswer{}, errorf(CodeStoreUnavailable, "ledger unavailable")
		case applied && fence >= token:
			// Checked again after the read (FM80): the generation may have
			// ended while the read waited, and the row may then hold a
			// later generation's checkpoint. Current before and after the
			// read, it was current during it, and no later generation
			// had written yet.
			if err := g.current(ctx, caller, name, owner, token); err != nil {
				return CheckpointAnswer{}, err
			}
			return CheckpointAnswer{Name: name, Token: token, Checkpoint: cp}, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return CheckpointAnswer{}, ledgerBehind(name, token, fence)
		}
		g.cfg.Hooks.call(HookLedgerBehind, name, token)
		if !pauseFor(ctx, min(pause, left)) {
			return CheckpointAnswer{}, ledgerBehind(name, token, fence)
		}
	}
}

// ledgerMark is an offset of a partition the ledger must have applied up
// to before a checkpoint read answers.
type ledgerMark struct {
	topic     string
	partition int32
	offset    int64
}

// movedFrom returns, for each partition name lived on under its route's
// earlier partition counts (Config.Placements) other than place's, the
// partition's last stable offset now (FM82). Every record an earlier
// generation wrote there is below it: the lease moved only when no lease
// of the route was live and no transaction of the route was open
// (`routes set-partitions`, FM83), and every producer of the lease's
// transactional id since was fenced by the epoch bumps of later
// generations. The caller's barrier is on place's partition only, so
// without these marks a ledger that applies the new partition first (a
// rebuild, an instance split by --partitions) would answer as final a
// row the old partition is still to move.
func (g *Gateway) movedFrom(ctx context.Context, name string, place txnmap.Placement) ([]ledgerMark, error) {
	pattern, _ := g.router.PatternOf(name)
	var marks []ledgerMark
	for _, h := range g.cfg.Placements {
		if h.Pattern != pattern {
			continue
		}
		p, err := g.router.ResolveUnder(name, h.Partitions)
		if err != nil {
			return nil, err
		}
		m := ledgerMark{topic: h.Topic, partition: p.Partition}
		if (m.topic == place.Topic && m.partition == place.Partition) || slices.ContainsFunc(marks, m.same) {
			continue
		}
		lso, err := g.insp.lastStable(ctx, m.topic, []int32{m.partition})
		if err != nil {
			return nil, err
		}
		m.offset = lso[m.partition]
		marks = append(marks, m)
	}
	return marks, nil
}

func (m ledgerMark) same(o ledgerMark) bool { return m.topic == o.topic && m.partition == o.partition }

// qLedgerPosition reads the ledger's next offset on a partition (0: never
// applied).
const qLedgerPosition = `
SELECT coalesce((SELECT next_offset FROM consumer_positions WHERE topic = $1 AND partition = $2), 0)`

// appliedTo reports whether the ledger has applied every mark's partition
// up to its offset.
func appliedTo(ctx context.Context, pool *pgxpool.Pool, marks []ledgerMark) (bool, error) {
	for _, m := range marks {
		var next int64
		if err := pool.QueryRow(ctx, qLedgerPosition, m.topic, m.partition).Scan(&next); err != nil {
			return false, err
		}
		if next < m.offset {
			return false, nil
		}
	}
	return true, nil
}

// current refuses unless (owner, token) is the lease's current, active,
// unexpired generation in Postgres and caller may act for its client.
func (g *Gateway) current(ctx context.Context, caller *Client, name, owner string, token int64) error {
	l, err := g.store.Get(ctx, name)
	if errors.Is(err, leasestore.ErrNotFound) {
		err = &leasestore.LostError{Name: name, Reason: leasestore.LostNotFound}
	}
	if err == nil {
		err = l.Holds(owner, token)
	}
	if err != nil {
		return err
	}
	if e := caller.mayActFor(l.Client, name); e != nil {
		return e
	}
	return nil
}

// Polling the ledger while a checkpoint read waits: the first pause, then
// doubling up to the last.
const (
	ledgerPollFirst = 10 * time.Millisecond
	ledgerPollMax   = 100 * time.Millisecond
)

// pauseFor waits d or until ctx ends; it reports whether d passed.
func pauseFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ledgerBehind is the answer when the ledger has not applied the caller's
// barrier in time: nothing changed, retry later.
func ledgerBehind(name string, token, fence int64) *Error {
	e := errorf(CodeLedgerBehind, "the ledger has not applied the barrier of token %d of %q yet (its fence is at %d); retry", token, name, fence)
	e.LedgerToken = &fence
	return e
}

// DefaultCheckpointWait and MaxCheckpointWait bound a checkpoint read's
// wait for the ledger (the wait query parameter).
const (
	DefaultCheckpointWait = 5 * time.Second
	MaxCheckpointWait     = 30 * time.Second
)

// qReadCheckpoint reads, in one statement (one snapshot), the token of
// the lease's fence on a partition (0: none) and the lease's checkpoint
// row: the fence at N or above means every checkpoint of a generation
// before N is in the row, or none was written.
const qReadCheckpoint = `
SELECT coalesce((SELECT token FROM fences WHERE lease = $1 AND barrier_partition = $2), 0),
       c.token, c.owner_id, c.batch_id, c.partition, c."offset", c.value, c.value_type
  FROM (VALUES (1)) AS one (x) LEFT JOIN checkpoints c ON c.lease = $1`

func readCheckpoint(ctx context.Context, pool *pgxpool.Pool, lease string, partition int32) (int64, *CheckpointView, error) {
	var fence int64
	var token, offset *int64
	var owner, batch *string
	var part *int32
	var value []byte
	var kind *string
	err := pool.QueryRow(ctx, qReadCheckpoint, lease, partition).Scan(&fence, &token, &owner, &batch, &part, &offset, &value, &kind)
	if err != nil || token == nil {
		return fence, nil, err
	}
	return fence, &CheckpointView{Token: *token, OwnerID: *owner, BatchID: *batch, Partition: *part, Offset: *offset,
		Value: typedValue(*kind, value)}, nil
}
