package materializer_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/materializer"
	"github.com/fencegate/fencegate/txnmap"
)

const (
	// topic is the lease topic asked of kafkatest: its name on kfake; on
	// an external cluster the test's own topic is b.topic.
	topic      = "shard-output"
	partitions = 16
)

var key = []byte("test barrier key 0123456789")

type testBundle struct {
	t      testing.TB
	db     *pgtest.DB
	kafka  *kafkatest.Cluster
	topic  string // the lease topic (b.kafka.Topic)
	router *txnmap.Router
	signer *barrier.Signer
	writer *kafka.Producer
	ctx    context.Context
	// replicas counts the gateways a test started (each gets its own name).
	replicas int
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	return setupOn(t, kafkatest.Start(t, topic, partitions))
}

// setupOn is setup on the cluster k (one behind fault proxies).
func setupOn(t testing.TB, k *kafkatest.Cluster) *testBundle {
	t.Helper()
	router, err := txnmap.NewRouter(k.RouterPrefix("test"), []txnmap.Route{{Pattern: "shard:*", Topic: k.Topic, Partitions: partitions}})
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := barrier.NewSigner(key)
	b := &testBundle{t: t, db: pgtest.New(t), kafka: k, topic: k.Topic, router: router,
		signer: signer, ctx: context.Background()}
	cm, err := k.Conn.ConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	cm["enable.metrics.push"], cm["go.logs.channel.enable"], cm["linger.ms"] = false, false, 0
	b.writer, err = kafka.NewProducer(&cm)
	if err != nil {
		t.Fatal(err)
	}
	w := b.writer // a test may replace b.writer (freshWriter): drain this one's events
	go func() {
		for range w.Events() {
		}
	}()
	t.Cleanup(w.Close)
	return b
}

func (b *testBundle) newMaterializer(mod func(*materializer.Config)) *materializer.Materializer {
	b.t.Helper()
	return b.newMaterializerOn(b.db, mod)
}

func (b *testBundle) newMaterializerOn(db *pgtest.DB, mod func(*materializer.Config)) *materializer.Materializer {
	b.t.Helper()
	cfg := materializer.Config{Kafka: b.kafka.Conn, BarrierKey: key, PollTimeout: 20 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	m, err := materializer.New(db.Pool, b.router, cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	return m
}

// rec describes a record to write directly to the topic.
type rec struct {
	lease   string
	token   int64
	batch   string
	seq     int
	barrier bool
	// checkpoint: a batch's checkpoint record (raw is its value)
	checkpoint bool
	value      []byte         // for barriers: the sealed grant (nil: seal a valid one)
	bare       bool           // no fencegate headers at all
	headers    []kafka.Header // the worker's headers, after the stamp
	raw        []byte         // for data records: the value (nil: lease/token/batch/seq)
}

func data(lease string, token int64, batch string, seq int) rec {
	return rec{lease: lease, token: token, batch: batch, seq: seq}
}

func bar(lease string, token int64) rec { return rec{lease: lease, token: token, barrier: true} }

func (b *testBundle) seal(lease string, token int64) []byte {
	id, err := txnmap.TransactionalID(b.kafka.RouterPrefix("test"), lease)
	if err != nil {
		b.t.Fatal(err)
	}
	v, err := b.signer.Seal(barrier.Grant{Lease: lease, Token: token, Owner: "o", TransactionalID: id,
		ProducerID: 7, Epoch: 1, IssuedAt: time.Unix(0, 0).UTC()})
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

// write produces recs, in order, to the partition of lease shard:1-style
// names, and returns the offset of the last one.
func (b *testBundle) write(partition int32, recs ...rec) int64 {
	b.t.Helper()
	t := b.topic
	dch := make(chan kafka.Event, len(recs))
	for _, r := range recs {
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &t, Partition: partition}, Value: []byte(fmt.Sprintf("%s/%d/%s/%d", r.lease, r.token, r.batch, r.seq))}
		if !r.bare {
			m.Headers = barrier.Stamp{Lease: r.lease, Token: r.token, Owner: "o", Batch: r.batch, Seq: r.seq, Barrier: r.barrier,
				Checkpoint: r.checkpoint}.Headers()
		}
		m.Headers = append(m.Headers, r.headers...)
		if r.raw != nil {
			m.Value = r.raw
		}
		if r.barrier {
			m.Value = r.value
			if m.Value == nil {
				m.Value = b.seal(r.lease, r.token)
			}
		}
		if err := b.writer.Produce(m, dch); err != nil {
			b.t.Fatal(err)
		}
		ev := (<-dch).(*kafka.Message) // one at a time keeps the order exact
		if ev.TopicPartition.Error != nil {
			b.t.Fatal(ev.TopicPartition.Error)
		}
	}
	return b.last(partition)
}

func (b *testBundle) last(partition int32) int64 {
	_, high, err := b.writer.QueryWatermarkOffsets(b.topic, partition, 10000)
	if err != nil {
		b.t.Fatal(err)
	}
	return high - 1
}

// runUntil runs m until partition's stored position passes lastOffset.
func (b *testBundle) runUntil(m *materializer.Materializer, db *pgtest.DB, partition int32, lastOffset int64) {
	b.t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	b.waitPosition(db, partition, lastOffset+1, done)
	cancel()
	if err := <-done; err != nil {
		b.t.Fatalf("materializer: %v", err)
	}
}

// runOrStop runs m until it stops on its own (its error) or reaches
// lastOffset (nil).
func (b *testBundle) runOrStop(m *materializer.Materializer, db *pgtest.DB, partition int32, lastOffset int64) error {
	b.t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	if err := b.pollPosition(db, partition, lastOffset+1, done); err != nil {
		return err
	}
	cancel()
	if err := <-done; err != nil {
		b.t.Fatalf("materializer: %v", err)
	}
	return nil
}

func (b *testBundle) waitPosition(db *pgtest.DB, partition int32, want int64, done chan error) {
	b.t.Helper()
	if err := b.pollPosition(db, partition, want, done); err != nil {
		b.t.Fatalf("materializer stopped early: %v", err)
	}
}

// pollPosition waits until the stored position reaches want (nil) or the
// materializer stops (its error).
func (b *testBundle) pollPosition(db *pgtest.DB, partition int32, want int64, done chan error) error {
	b.t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for {
		var pos int64
		err := db.Pool.QueryRow(b.ctx, `SELECT next_offset FROM consumer_positions WHERE topic=$1 AND partition=$2`, b.topic, partition).Scan(&pos)
		if err == nil && pos >= want {
			return nil
		}
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("stopped without error")
			}
			return err
		case <-tick.C:
		case <-deadline:
			b.t.Fatalf("position %d never reached %d", pos, want)
		}
	}
}

// snapshot renders the materializer's tables for comparison.
func snapshot(t testing.TB, db *pgtest.DB) string {
	t.Helper()
	return dumpRows(t, db,
		`SELECT lease, token, batch_id, seq, partition, "offset", encode(value, 'escape'), headers::text FROM accepted_records ORDER BY partition, "offset"`,
		`SELECT coalesce(lease,''), coalesce(token,0), coalesce(batch_id,''), coalesce(seq,-1), partition, "offset", reason FROM rejected_records ORDER BY partition, "offset"`,
		`SELECT lease, token, barrier_partition, barrier_offset FROM fences ORDER BY lease, barrier_partition`,
		`SELECT lease, batch_id, seq FROM applied_keys ORDER BY 1, 2, 3`,
		`SELECT partition, "offset", verdict, coalesce(lease, ''), coalesce(token, 0), encode(value, 'escape'), headers::text FROM kept_records ORDER BY partition, "offset"`,
		`SELECT partition, pattern, state, version, "offset" FROM rollout_marks ORDER BY partition, pattern`,
		`SELECT lease, token, owner_id, batch_id, partition, "offset", encode(value, 'escape') FROM checkpoints ORDER BY lease`)
}

// dumpRows renders the rows of each query, a line a row, "--" after
// each query.
func dumpRows(t testing.TB, db *pgtest.DB, queries ...string) string {
	t.Helper()
	var sb strings.Builder
	for _, q := range queries {
		rows, err := db.Pool.Query(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals, _ := rows.Values()
			fmt.Fprintln(&sb, vals...)
		}
		rows.Close()
		sb.WriteString("--\n")
	}
	return sb.String()
}

func count(t testing.TB, db *pgtest.DB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

const maxToken = math.MaxInt64
