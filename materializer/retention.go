package materializer

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LedgerValues says what the ledger keeps of an accepted record's bytes
// (docs/ledger.md, "Retention and the dedup window").
type LedgerValues string

// The modes of LedgerValues.
const (
	// KeepValues keeps each accepted record's key, value and headers.
	KeepValues LedgerValues = "keep"
	// DropValues keeps metadata-only rows: place, stamp, dedup key and
	// the Digest of key, value and headers; key, value and headers are
	// NULL (FM72).
	DropValues LedgerValues = "drop"
)

// DefaultLedgerValues is Config.LedgerValues' default.
const DefaultLedgerValues = KeepValues

// DefaultLedgerRetention is the retention, and so the dedup window, of a
// ledger whose materializer recorded none (SetRetention): a week.
const DefaultLedgerRetention = 7 * 24 * time.Hour

// DefaultPruneBatch is PruneConfig.Batch's default: rows deleted by one
// statement.
const DefaultPruneBatch = 5000

// ErrInsideWindow is Prune refusing a cutoff younger than the ledger's
// retention: it would delete dedup keys a retry may still need (FM71).
var ErrInsideWindow = errors.New("materializer: prune inside the dedup window")

// ErrKeptForever is Prune refusing a ledger whose retention is forever.
var ErrKeptForever = errors.New("materializer: the ledger's retention is forever (--ledger-retention 0)")

// checkValues refuses a mode that is neither keep nor drop.
func checkValues(v LedgerValues) error {
	if v != KeepValues && v != DropValues {
		return fmt.Errorf("materializer: ledger values %q: want %q or %q", v, KeepValues, DropValues)
	}
	return nil
}

// ParseLedgerValues reads a --ledger-values flag.
func ParseLedgerValues(s string) (LedgerValues, error) {
	v := LedgerValues(s)
	return v, checkValues(v)
}

// Digest is the SHA-256 a metadata-only row keeps (accepted_records.digest)
// for the data record r of the raw topic: over its key, its value and
// its headers other than fencegate's as the ledger would keep them (a
// JSON object, names sorted), each framed as a presence byte and a
// big-endian 8-byte length, so a NULL differs from an empty value. A
// reader recomputes it from the raw topic to prove that a record is the
// one the ledger accepted.
func Digest(r *kafka.Message) ([]byte, error) {
	headers, err := userHeaders(r.Headers)
	if err != nil {
		return nil, err
	}
	return digest(r.Key, r.Value, headers), nil
}

func digest(key, value []byte, headers string) []byte {
	h := sha256.New()
	var frame [9]byte
	for _, part := range [...][]byte{key, value, []byte(headers)} {
		frame[0] = 0
		if part != nil {
			frame[0] = 1
		}
		binary.BigEndian.PutUint64(frame[1:], uint64(len(part)))
		h.Write(frame[:])
		h.Write(part)
	}
	return h.Sum(nil)
}

// SetRetention records the ledger's retention, the dedup window Prune
// keeps (ledger_retention); 0 keeps the ledger forever. Every
// materializer on one ledger should record the same: the last one started
// wins.
func SetRetention(ctx context.Context, pool *pgxpool.Pool, retention time.Duration) error {
	if retention < 0 {
		return fmt.Errorf("materializer: ledger retention %v must not be negative", retention)
	}
	var arg any // seconds; NULL is forever
	if retention > 0 {
		arg = retention.Seconds()
	}
	_, err := pool.Exec(ctx, qSetRetention, arg)
	return err
}

// Retention reads the ledger's recorded retention (DefaultLedgerRetention
// when none is recorded); forever is true for a ledger kept forever.
func Retention(ctx context.Context, pool *pgxpool.Pool) (retention time.Duration, forever bool, err error) {
	var secs float64
	err = pool.QueryRow(ctx, qReadRetention).Scan(&forever, &secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return DefaultLedgerRetention, false, nil
	}
	return time.Duration(secs * float64(time.Second)), forever, err
}

// PruneConfig is one prune of the ledger. Zero fields take the defaults
// noted.
type PruneConfig struct {
	// OlderThan is the age of the rows deleted (default: the recorded
	// retention); below the recorded retention, Prune refuses
	// (ErrInsideWindow).
	OlderThan time.Duration
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	// Batch is the most rows one statement deletes (default
	// DefaultPruneBatch).
	Batch int
	// Now is the clock the cutoff is taken from (default: the ledger's
	// own clock, the one its rows' times are on).
	Now func() time.Time
}

// PruneReport is what one prune deleted (or, dry, would delete).
type PruneReport struct {
	// Cutoff: rows older than it, by the ledger's clock, were deleted.
	Cutoff time.Time
	// Accepted, Rejected and Kept count the rows of accepted_records,
	// rejected_records and kept_records.
	Accepted, Rejected, Kept int64
	// Statements is how many prune statements ran.
	Statements int
	// OlderThan is the age pruned; RetentionFound the recorded retention
	// it was checked against.
	OlderThan, RetentionFound time.Duration
}

// pruned is one table Prune deletes from, with its statement.
type pruned struct {
	query string
	count func(*PruneReport) *int64
}

var prunedTables = []pruned{
	{qPruneAccepted, func(r *PruneReport) *int64 { return &r.Accepted }},
	{qPruneRejected, func(r *PruneReport) *int64 { return &r.Rejected }},
	{qPruneKept, func(r *PruneReport) *int64 { return &r.Kept }},
}

// Prune deletes the rows of accepted_records, rejected_records and
// kept_records older than cfg.OlderThan, partition by partition, oldest
// first, in statements of at most cfg.Batch rows, each its own
// transaction: it is safe while materializers run (they only insert, at
// each partition's head). It never deletes a row younger than the
// ledger's recorded retention (FM71), nor anything of fences,
// consumer_positions, rollout_marks or checkpoints, which are state.
func Prune(ctx context.Context, pool *pgxpool.Pool, cfg PruneConfig) (PruneReport, error) {
	rep, err := pruneCutoff(ctx, pool, &cfg)
	if err != nil {
		return rep, err
	}
	parts, err := prunePartitions(ctx, pool)
	if err != nil {
		return rep, err
	}
	for _, p := range parts {
		for _, t := range prunedTables {
			if err := prunePartition(ctx, pool, cfg, p, t, &rep); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// pruneCutoff fills cfg's defaults and checks its age against the
// recorded retention; the report carries the cutoff.
func pruneCutoff(ctx context.Context, pool *pgxpool.Pool, cfg *PruneConfig) (PruneReport, error) {
	retention, forever, err := Retention(ctx, pool)
	if err != nil {
		return PruneReport{}, err
	}
	if forever {
		return PruneReport{}, ErrKeptForever
	}
	cfg.OlderThan = cmp.Or(cfg.OlderThan, retention)
	cfg.Batch = cmp.Or(cfg.Batch, DefaultPruneBatch)
	rep := PruneReport{OlderThan: cfg.OlderThan, RetentionFound: retention}
	if cfg.OlderThan < retention {
		return rep, fmt.Errorf("%w: --older-than %v is below the ledger's retention %v", ErrInsideWindow, cfg.OlderThan, retention)
	}
	if cfg.Batch < 0 {
		return rep, fmt.Errorf("materializer: prune batch %d must be positive", cfg.Batch)
	}
	now := time.Time{}
	if cfg.Now != nil {
		now = cfg.Now()
	} else if err := pool.QueryRow(ctx, qClock).Scan(&now); err != nil {
		return rep, err
	}
	rep.Cutoff = now.Add(-cfg.OlderThan)
	return rep, nil
}

func prunePartitions(ctx context.Context, pool *pgxpool.Pool) ([]partitionKey, error) {
	rows, err := pool.Query(ctx, qPrunePartitions)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (partitionKey, error) {
		var k partitionKey
		return k, row.Scan(&k.topic, &k.partition)
	})
}

// prunePartition deletes t's old rows of partition p, one batch at a
// time from its oldest offset, until a batch meets a young row or the
// partition's last row.
func prunePartition(ctx context.Context, pool *pgxpool.Pool, cfg PruneConfig, p partitionKey, t pruned, rep *PruneReport) error {
	for from := int64(0); ; {
		var deleted, looked, last int64
		var allOld bool
		err := pool.QueryRow(ctx, t.query, p.topic, p.partition, from, rep.Cutoff, cfg.Batch, cfg.DryRun).
			Scan(&deleted, &looked, &allOld, &last)
		if err != nil {
			return fmt.Errorf("materializer: prune %s/%d: %w", p.topic, p.partition, err)
		}
		rep.Statements++
		*t.count(rep) += deleted
		if !allOld || looked < int64(cfg.Batch) {
			return nil
		}
		from = last + 1
	}
}

// PruneEvery prunes m's ledger at its recorded retention now and every
// interval until ctx ends. Each prune has interval to finish (a prune
// stuck on a lock fails rather than stalls the loop). A failed prune is
// logged, counted in fencegate.materializer.prunes{outcome="failed"} and
// tried again at the next tick: it must not stop the materializer. The
// counter of successful ones is what FencegateLedgerNotPruned watches.
func (m *Materializer) PruneEvery(ctx context.Context, interval time.Duration) {
	m.met.prunesFromZero(ctx)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, interval)
		rep, err := Prune(pctx, m.pool, PruneConfig{})
		cancel()
		if ctx.Err() != nil {
			return
		}
		m.met.prunedOnce(ctx, rep, err)
		if err != nil {
			m.log.Warn("ledger prune failed; trying again at the next interval", "err", err, "interval", interval)
		} else {
			m.log.Info("ledger pruned", "older_than", rep.OlderThan, "cutoff", rep.Cutoff,
				"accepted", rep.Accepted, "rejected", rep.Rejected, "kept", rep.Kept, "statements", rep.Statements)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
