package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
)

// BenchmarkIdleProducers: what live producers that send nothing cost the
// process (BENCHMARKS-history.md, "Cold start of 1,000, again", and
// BENCHMARKS.md, "Cold start and idle on Apache Kafka"). 100 producers
// are started as a handover starts them (metadata, InitTransactions, one
// committed transaction), then the process's CPU is read over a 3 s
// window in which they only exist; the
// broker is idle meanwhile (kfake in-process, or the Apache Kafka of
// FENCEGATE_TEST_KAFKA_BROKERS). Reports cpu_pct_of_core (for the 100),
// and per producer: the threads of the process, and the CPU (us a second)
// and timeslices (a second) of librdkafka's own threads and of the Go
// runtime's, from /proc/self/task/*/schedstat, which counts the
// microsecond wakeups that tick-based accounting misses.
func BenchmarkIdleProducers(b *testing.B) {
	const n = 100
	k := kafkatest.Start(b, "idle", 16)
	cfg := KafkaConfig{Config: k.Conn, TransactionTimeoutMS: 10000}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := make([]*producer, 0, n)
	defer func() {
		for _, p := range ps {
			p.close()
		}
	}()
	for i := range n {
		p, err := newProducer(cfg, fmt.Sprintf("%s/idle-%d", k.RouterPrefix("idle"), i))
		if err != nil {
			b.Fatal(err)
		}
		ps = append(ps, p)
		if err := startIdle(ctx, p, k.Topic, int32(i%16)); err != nil {
			b.Fatal(err)
		}
	}
	var pct float64
	var split threadSplit
	for b.Loop() {
		c0, t0, s0 := processCPU(), time.Now(), readThreads()
		if !pause(ctx, 3*time.Second) {
			b.Fatal(ctx.Err())
		}
		el := time.Since(t0).Seconds()
		pct = 100 * (processCPU() - c0).Seconds() / el
		split = readThreads().since(s0, el)
	}
	b.ReportMetric(pct, "cpu_pct_of_core")
	b.ReportMetric(float64(split.threads)/n, "threads/producer")
	b.ReportMetric(split.rdkNS/1e3/n, "rdk_us/producer-s")
	b.ReportMetric(split.goNS/1e3/n, "go_us/producer-s")
	b.ReportMetric(split.rdkSlices/n, "rdk_wakeups/producer-s")
	b.ReportMetric(split.goSlices/n, "go_wakeups/producer-s")
}

// threadSplit is the CPU (ns) and timeslices of this process's threads,
// librdkafka's (named rdk:...) apart from the Go runtime's.
type threadSplit struct {
	threads             int
	rdkNS, goNS         float64
	rdkSlices, goSlices float64
}

// readThreads sums /proc/self/task/*/schedstat (ns on a CPU, and
// timeslices) by kind of thread.
func readThreads() threadSplit {
	var s threadSplit
	dirs, _ := filepath.Glob("/proc/self/task/*")
	for _, d := range dirs {
		comm, err1 := os.ReadFile(d + "/comm")
		st, err2 := os.ReadFile(d + "/schedstat")
		f := strings.Fields(string(st))
		if err1 != nil || err2 != nil || len(f) < 3 {
			continue
		}
		ns, _ := strconv.ParseFloat(f[0], 64)
		sl, _ := strconv.ParseFloat(f[2], 64)
		s.threads++
		if strings.HasPrefix(string(comm), "rdk:") {
			s.rdkNS, s.rdkSlices = s.rdkNS+ns, s.rdkSlices+sl
		} else {
			s.goNS, s.goSlices = s.goNS+ns, s.goSlices+sl
		}
	}
	return s
}

// since is s minus the earlier s0, per second of el (threads: s's).
func (s threadSplit) since(s0 threadSplit, el float64) threadSplit {
	return threadSplit{threads: s.threads,
		rdkNS: (s.rdkNS - s0.rdkNS) / el, goNS: (s.goNS - s0.goNS) / el,
		rdkSlices: (s.rdkSlices - s0.rdkSlices) / el, goSlices: (s.goSlices - s0.goSlices) / el}
}

// startIdle brings p to where a handover leaves it: connected, epoch
// bumped, one transaction committed.
func startIdle(ctx context.Context, p *producer, topic string, partition int32) error {
	if err := p.warm(ctx, topic); err != nil {
		return err
	}
	if err := p.p.InitTransactions(ctx); err != nil {
		return err
	}
	if err := p.p.BeginTransaction(); err != nil {
		return err
	}
	if _, err := p.send(ctx, topic, partition, []record{{key: []byte("k"), value: []byte("v")}}); err != nil {
		return err
	}
	return p.p.CommitTransaction(ctx)
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
