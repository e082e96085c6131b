package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate/leasestore"
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
// token or above) and answers the lease's checkpoint then, final for every
// earlier generation (docs/design.md, "Checkpoints"). The caller's
// generation must be the lease's current, active, unexpired one in
// Postgres (else lease_lost), and caller must be allowed to act for its
// client. Past wait: 503 ledger_behind, nothing changed.
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
	l, err := g.store.Get(ctx, name)
	if errors.Is(err, leasestore.ErrNotFound) {
		err = &leasestore.LostError{Name: name, Reason: leasestore.LostNotFound}
	}
	if err == nil {
		err = l.Holds(owner, token)
	}
	if err != nil {
		return CheckpointAnswer{}, err
	}
	if e := caller.mayActFor(l.Client, name); e != nil {
		return CheckpointAnswer{}, e
	}
	place, err := g.router.Resolve(name)
	if err != nil {
		return CheckpointAnswer{}, err
	}
	deadline := time.Now().Add(wait)
	for pause := ledgerPollFirst; ; pause = min(2*pause, ledgerPollMax) {
		fence, cp, err := readCheckpoint(ctx, g.cfg.Ledger, name, place.Partition)
		switch {
		case err != nil:
			return CheckpointAnswer{}, errorf(CodeStoreUnavailable, "ledger unavailable")
		case fence >= token:
			return CheckpointAnswer{Name: name, Token: token, Checkpoint: cp}, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return CheckpointAnswer{}, ledgerBehind(name, token, fence)
		}
		if !pauseFor(ctx, min(pause, left)) {
			return CheckpointAnswer{}, ledgerBehind(name, token, fence)
		}
	}
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
