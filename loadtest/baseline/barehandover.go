package baseline

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// RunBareHandovers is the handover yardstick (`fencegate
// loadtest-baseline --mode handover`): b.Producers loops at once, as many
// as the gateway's handover slots, each for b.Duration: a new
// transactional producer under a transactional.id never used before (as
// in a cold start), InitTransactions, a transaction of one record
// committed, then the producer closed in the background (the gateway
// keeps its producer; a close is not part of a handover). It is what a handover costs the client library and
// the broker, without Postgres, HTTP, the barrier's signing or the
// gateway's connection warm-up; its producers have the gateway's
// librdkafka settings (barehandoverConfig).
func RunBareHandovers(ctx context.Context, conn kafkaconn.Config, b Child) (report.HandoverFigures, error) {
	var done atomic.Int64
	var hist report.Histogram
	hctx, cancel := context.WithTimeout(ctx, b.Duration)
	defer cancel()
	start := time.Now()
	var wg, closing sync.WaitGroup
	defer closing.Wait()
	errs := make(chan error, b.Producers)
	for i := range b.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; hctx.Err() == nil; n++ {
				t0 := time.Now()
				if err := bareHandover(ctx, &closing, conn, fmt.Sprintf("loadtest-handover-%d-%d", i, n), int32(n%stack.Partitions)); err != nil {
					errs <- err
					return
				}
				hist.Record(time.Since(t0))
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return report.HandoverFigures{}, err
	}
	return report.HandoverFigures{Loops: b.Producers, Handovers: done.Load(), Seconds: time.Since(start).Seconds(),
		P50Ms: hist.Ms(0.5), P99Ms: hist.Ms(0.99)}, nil
}

// handoverTimeout bounds the InitTransactions of one yardstick handover.
const handoverTimeout = 30 * time.Second

// barehandoverConfig are the settings of the yardstick's producers: those
// the gateway gives its own that bear on a handover's round trips.
var barehandoverConfig = kafka.ConfigMap{"linger.ms": 1, "enable.idempotence": true, "retry.backoff.ms": 20,
	"reconnect.backoff.ms": 10, "enable.metrics.push": false, "go.logs.channel.enable": false,
	"go.events.channel.size": 64, "go.produce.channel.size": 0, "go.delivery.report.fields": "none"}

// bareHandover is one handover of the yardstick; the producer is closed
// in the background, counted in closing. A handover started before the
// loop's end runs to its end (bounded as the gateway bounds its
// InitTransactions, by handoverTimeout).
func bareHandover(ctx context.Context, closing *sync.WaitGroup, conn kafkaconn.Config, transactionalID string, partition int32) error {
	cm, err := conn.ConfigMap()
	if err != nil {
		return err
	}
	for k, v := range barehandoverConfig {
		cm[k] = v
	}
	cm["transactional.id"] = transactionalID
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return err
	}
	closing.Add(1)
	defer func() { go func() { defer closing.Done(); p.Close() }() }()
	go func() {
		for range p.Events() {
		}
	}()
	ictx, cancel := context.WithTimeout(ctx, handoverTimeout)
	defer cancel()
	if err := p.InitTransactions(ictx); err != nil {
		return err
	}
	topic := stack.DirectTopic
	msgs := []kafka.Message{{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition}, Value: []byte("handover")}}
	return directBatch(p, msgs)
}
