package materializer

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/internal/kafkatest"
)

// TestFM116_StateReadOutlivesABrokerRestart: the trusted sink reads the
// end of its state partition when it takes a partition. On Apache Kafka
// (a broker of the test's own) the broker is killed with SIGKILL while
// that read is asked, and started again on its data: the read must wait
// for it and return the partition's true end, as it waits for a leader
// that moves, never fail while the broker is only gone for a while (the
// sink would stop and `fencegate materialize` exit, FM116).
func TestFM116_StateReadOutlivesABrokerRestart(t *testing.T) {
	t.Parallel()
	const topic = "fm116-state"
	a := kafkatest.StartApache(t, topic, 1, kafkatest.ApacheOptions{})
	wrote := produceN(t, a.Conn.Brokers, topic, 3)
	c := stateConsumer(t, a.Conn.Brokers)
	if high, err := stateEnd(c, topic, 0, time.Now().Add(time.Minute), nil); err != nil || high != wrote {
		t.Fatalf("before the kill: end %d, %v; want %d", high, err, wrote)
	}

	a.Kill(1)
	refused := make(chan error, 1)
	type end struct {
		high int64
		err  error
	}
	done := make(chan end, 1)
	go func() {
		high, err := stateEnd(c, topic, 0, time.Now().Add(time.Minute), func(err error) {
			select {
			case refused <- err:
			default:
			}
		})
		done <- end{high, err}
	}()
	select {
	case err := <-refused:
		t.Logf("while the broker was down the read was refused with %v, and asked again", err)
	case e := <-done:
		t.Fatalf("the state read ended while the broker was down: end %d, %v (the sink stops on it: FM116)", e.high, e.err)
	}
	a.Start()
	e := <-done
	if e.err != nil || e.high != wrote {
		t.Fatalf("after the restart: end %d, %v; want %d, nil", e.high, e.err, wrote)
	}
}

// produceN writes n records to partition 0 of topic and returns the
// partition's end offset after them.
func produceN(t *testing.T, brokers, topic string, n int) int64 {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "enable.idempotence": true, "log_level": 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tp := kafka.TopicPartition{Topic: &topic, Partition: 0}
	var last int64
	for i := 0; i < n; i++ {
		ch := make(chan kafka.Event, 1)
		if err := p.Produce(&kafka.Message{TopicPartition: tp, Value: []byte("state")}, ch); err != nil {
			t.Fatal(err)
		}
		m := (<-ch).(*kafka.Message)
		if m.TopicPartition.Error != nil {
			t.Fatal(m.TopicPartition.Error)
		}
		last = int64(m.TopicPartition.Offset)
	}
	return last + 1
}

// stateConsumer is a consumer like restore's, closed when t ends.
func stateConsumer(t *testing.T, brokers string) *kafka.Consumer {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "fm116",
		"isolation.level": "read_committed", "enable.auto.commit": false, "log_level": 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
