package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// RunDirect runs the direct baseline alone (the process of `fencegate
// loadtest-baseline --mode direct`): one transactional producer per lease,
// the batches of sc, for sc.Duration.
func RunDirect(ctx context.Context, conn kafkaconn.Config, sc Scenario) (report.DirectFigures, error) {
	router, err := stack.NewRouter()
	if err != nil {
		return report.DirectFigures{}, err
	}
	// The direct loop lasts baselineDuration: half the gateway phase.
	sc.Duration *= 2
	r := &runner{sc: sc, stack: &stack.Stack{Kafka: conn, Router: router}}
	rep := &report.Report{}
	err = r.direct(ctx, rep)
	return rep.Direct, err
}

// RunBare is the bare-producer yardstick: producers transactional
// producers in a loop, each transaction batchSize records of recordSize
// bytes with two headers each, committed without waiting for per-record
// delivery reports (CommitTransaction flushes), no HTTP, no leases, for d.
// It is what the client library and the broker can do on this machine;
// the direct baseline differs from it only in waiting for each record's
// delivery report and in its producer count (one per lease).
func RunBare(ctx context.Context, conn kafkaconn.Config, producers, batchSize, recordSize int, d time.Duration) (report.BareFigures, error) {
	value := bytes.Repeat([]byte("x"), recordSize)
	var records atomic.Int64
	bctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for i := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- bareProducer(bctx, conn, i, batchSize, value, &records)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return report.BareFigures{}, err
		}
	}
	return report.BareFigures{Producers: producers, Records: records.Load(), Seconds: time.Since(start).Seconds()}, nil
}

func bareProducer(ctx context.Context, conn kafkaconn.Config, i, n int, value []byte, records *atomic.Int64) error {
	cm, err := conn.ConfigMap()
	if err != nil {
		return err
	}
	for k, v := range (kafka.ConfigMap{"linger.ms": 1, "enable.metrics.push": false, "go.logs.channel.enable": false,
		"go.delivery.reports": false, "go.produce.channel.size": 0, "transactional.id": fmt.Sprintf("loadtest-bare-%d", i)}) {
		cm[k] = v
	}
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return err
	}
	defer p.Close()
	go func() {
		for range p.Events() {
		}
	}()
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.InitTransactions(ictx); err != nil {
		return err
	}
	topic := stack.DirectTopic
	part := int32(i % stack.Partitions)
	headers := []kafka.Header{{Key: "lease", Value: []byte("bare:" + strconv.Itoa(i))}, {Key: "seq", Value: nil}}
	for ctx.Err() == nil {
		if err := p.BeginTransaction(); err != nil {
			return err
		}
		for j := range n {
			h := append([]kafka.Header(nil), headers...)
			h[1].Value = []byte(strconv.Itoa(j))
			if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part},
				Value: value, Headers: h}, nil); err != nil {
				return err
			}
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := p.CommitTransaction(cctx)
		ccancel()
		if err != nil {
			return err
		}
		records.Add(int64(n))
	}
	return nil
}
