package baseline

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

// RunBare is the bare-producer yardstick: b.Producers transactional
// producers in a loop, each transaction b.BatchSize records of
// b.RecordSize bytes stamped like the gateway's (unless b.Plain),
// committed without waiting for per-record delivery reports
// (CommitTransaction flushes), no HTTP, no leases, for b.Duration. It is
// what the client library and the broker can do on this machine; the
// direct baseline differs from it only in waiting for each record's
// delivery report and in its producer count (one per lease).
func RunBare(ctx context.Context, conn kafkaconn.Config, b Child) (report.BareFigures, error) {
	value := bytes.Repeat([]byte("x"), b.RecordSize)
	var records atomic.Int64
	bctx, cancel := context.WithTimeout(ctx, b.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, b.Producers)
	for i := range b.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := transaction{topic: stack.DirectTopic, partition: int32(i % stack.Partitions),
				lease: "bare:" + strconv.Itoa(i), owner: "bare-" + strconv.Itoa(i), plain: b.Plain, size: b.BatchSize, value: value}
			errs <- bareProducer(bctx, conn, i, batch, &records)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return report.BareFigures{}, err
		}
	}
	return report.BareFigures{Producers: b.Producers, Records: records.Load(), Seconds: time.Since(start).Seconds()}, nil
}

func bareProducer(ctx context.Context, conn kafkaconn.Config, i int, batch transaction, records *atomic.Int64) error {
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
	for n := 0; ctx.Err() == nil; n++ {
		if err := p.BeginTransaction(); err != nil {
			return err
		}
		msgs := batch.messages(n)
		for j := range msgs {
			if err := p.Produce(&msgs[j], nil); err != nil {
				return err
			}
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := p.CommitTransaction(cctx)
		ccancel()
		if err != nil {
			return err
		}
		records.Add(int64(len(msgs)))
	}
	return nil
}
