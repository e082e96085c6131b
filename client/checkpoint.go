package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Checkpoint is a lease's checkpoint as the ledger keeps it: the value of
// the newest accepted batch that carried one (WithCheckpoint), whichever
// owner and generation wrote it, and where its checkpoint record is.
type Checkpoint struct {
	// Value is the checkpoint the batch carried, byte for byte.
	Value []byte
	// Token, OwnerID and BatchID name the generation, the owner and the
	// batch that wrote it.
	Token   int64
	OwnerID string
	BatchID string
	// Partition and Offset locate the checkpoint record in Kafka.
	Partition int32
	Offset    int64

	reader string // the owner of the client that read it, for Committed
}

// Committed reports whether c was written by batch batchID of the owner
// of the client that read it (Config.Owner): the batch is committed, and
// it is the lease's last checkpointed one. False for a nil c.
//
// It settles a batch whose outcome stayed unknown (ErrOutcomeUnknown):
// the batch a worker was sending when it lost the lease, or when a
// Produce's context ended. Once that batch was sent under a generation
// older than the one that read c (Lease.Grant().Token), the read waited
// for the ledger to apply the newer generation's barrier, so the batch
// either landed before it or is refused for good: false then means the
// batch is not the last checkpointed one, and for a worker whose batches
// each carry a checkpoint, one after the other, that it did not land
// (unless another owner's batch wrote c: resume from c.Value either way).
// A batch last sent under the current generation is settled by retrying
// it under the same batch id instead (Produce is idempotent).
func (c *Checkpoint) Committed(batchID string) bool {
	return c != nil && c.BatchID == batchID && c.OwnerID == c.reader
}

// defaultCheckpointWait is how long one checkpoint read asks the gateway
// to wait for the ledger (its wait parameter), when the context allows
// that long: the gateway's own default, below its 30s bound and the
// default HTTP timeout.
const defaultCheckpointWait = 5 * time.Second

// checkpointWait is the wait parameter of a checkpoint read under ctx: at
// most defaultCheckpointWait, and half of what ctx has left, so that the
// gateway's answer, ledger_behind included, arrives before ctx ends (the
// error after ctx ends then says how far the ledger is).
func checkpointWait(ctx context.Context) string {
	wait := defaultCheckpointWait
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)/2)
	}
	return strconv.FormatInt(max(wait.Milliseconds(), 1), 10) + "ms"
}

// Checkpoint returns the lease's checkpoint (nil, nil when it has none):
// the state the last accepted checkpointed batch left, from which a worker
// that just acquired the lease goes on. It reads the ledger through the
// gateway, once the ledger has applied the barrier of the lease's current
// generation: every batch of an older generation is then either in the
// checkpoint's history or refused for good, whoever sent it.
//
// Read it when a generation begins, after Acquire and before producing:
// it does not wait for the batches of the current generation, which the
// ledger may not have applied yet (the worker knows those itself, from
// Produce's answers).
//
// A ledger that has not caught up yet (503 ledger_behind) is asked again
// after its Retry-After until ctx ends; the error then matches ctx's
// error and the last answer (ErrorCode gives ledger_behind,
// Problem.LedgerToken the ledger's fence). A ledger whose materializer
// does not run never catches up: with context.Background() the read
// waits for it for as long as that lasts, so give ctx a deadline where
// the wait must end. lease_lost means the
// generation is over: the lease is lost. Transport errors and other 5xx
// are retried with backoff; other refusals are returned as a *Problem.
// ctx bounds this call only, never the lease's life.
func (l *Lease) Checkpoint(ctx context.Context) (*Checkpoint, error) {
	start := time.Now()
	cp, err := l.checkpoint(ctx)
	l.c.log.Debug("checkpoint read", "lease", l.name, "found", cp != nil, "latency", time.Since(start), "err", err)
	return cp, err
}

func (l *Lease) checkpoint(ctx context.Context) (*Checkpoint, error) {
	var last error // the last answer, for the error after ctx ends
	for n := 1; ; n++ {
		token, base, err := l.check()
		if err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ended("checkpoint "+l.name, ctx, last)
		}
		q := url.Values{"owner_id": {l.c.cfg.Owner}, "token": {strconv.FormatInt(token, 10)}, "wait": {checkpointWait(ctx)}}
		var reply checkpointReply
		err = l.c.call(ctx, base, http.MethodGet, "/v1/leases/"+url.PathEscape(l.name)+"/checkpoint?"+q.Encode(), nil, &reply)
		if err == nil {
			return reply.checkpoint(l.c.cfg.Owner)
		}
		if ctx.Err() == nil {
			last = err
		}
		switch reactionTo(err) {
		case lost:
			if lerr, ok := l.loseUnlessMoved(token, err); ok {
				return nil, lerr
			}
			// Our own new generation superseded token: read under the current one.
		case follow:
			l.follow(err)
			if n > 1 {
				_ = sleep(ctx, l.c.backoff(n, err)) // a context that ended is reported above
			}
		case retry:
			l.rehome(base, err)
			l.c.log.Debug("checkpoint read failed, retrying", "lease", l.name, "token", token, "err", err)
			_ = sleep(ctx, l.c.backoff(n, err))
		default:
			return nil, err
		}
	}
}

// checkpointReply is the 200 answer of GET /v1/leases/{name}/checkpoint.
type checkpointReply struct {
	Name       string `json:"name"`
	Token      int64  `json:"token"`
	Checkpoint *struct {
		Token     int64      `json:"token"`
		OwnerID   string     `json:"owner_id"`
		BatchID   string     `json:"batch_id"`
		Partition int32      `json:"partition"`
		Offset    int64      `json:"offset"`
		Value     typedValue `json:"value"`
	} `json:"checkpoint"`
}

// checkpoint is the reply's checkpoint (nil: none), read by owner.
func (r checkpointReply) checkpoint(owner string) (*Checkpoint, error) {
	c := r.Checkpoint
	if c == nil {
		return nil, nil
	}
	value, err := c.Value.bytes()
	if err != nil {
		return nil, errorf("decoding the checkpoint of %s: %w", r.Name, err)
	}
	return &Checkpoint{Value: value, Token: c.Token, OwnerID: c.OwnerID, BatchID: c.BatchID,
		Partition: c.Partition, Offset: c.Offset, reader: owner}, nil
}

// typedValue is a key, value or checkpoint in the JSON bodies: {"type":
// "BINARY", "data": base64}, {"type": "STRING", "data": text} or {"type":
// "JSON", "data": any JSON}.
type typedValue struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// bytes decodes v to the bytes it stands for.
func (v typedValue) bytes() ([]byte, error) {
	switch v.Type {
	case "BINARY", "STRING":
		var s string
		if err := json.Unmarshal(v.Data, &s); err != nil {
			return nil, fmt.Errorf("%s data: %w", v.Type, err)
		}
		if v.Type == "STRING" {
			return []byte(s), nil
		}
		return base64.StdEncoding.DecodeString(s)
	case "JSON":
		return []byte(v.Data), nil
	}
	return nil, fmt.Errorf("value of type %q: not BINARY, STRING or JSON", v.Type)
}
