package baseline

import (
	"strconv"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
)

// transaction is one transaction of a baseline producer (direct or
// bare), built like a gateway batch so that the yardstick is like for
// like: keys of the harness workers' shape ("a<attempt>/<i>"), and,
// unless Plain, the five headers the gateway stamps on every data record
// (lease, token, owner, batch, seq) encoded as the gateway encodes them
// (barrier.Stamper, the batch's headers in one slice). Plain is the form
// without headers: what the baselines measured before, reported next to
// the stamped form so that the cost of the headers themselves is seen.
type transaction struct {
	topic     string
	partition int32
	lease     string
	owner     string
	plain     bool
	size      int
	value     []byte
}

// messages returns the records of round n of the batch.
func (b transaction) messages(n int) []kafka.Message {
	msgs := make([]kafka.Message, b.size)
	attempt := "a" + strconv.Itoa(n) + "/"
	var stamper *barrier.Stamper
	var all []kafka.Header
	if !b.plain {
		stamper = barrier.Stamp{Lease: b.lease, Token: 1, Owner: b.owner, Batch: b.owner + "-" + strconv.Itoa(n)}.Stamper()
		all = make([]kafka.Header, 0, b.size*barrier.DataHeaders)
	}
	for i := range msgs {
		msgs[i] = kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &b.topic, Partition: b.partition},
			Key: []byte(attempt + strconv.Itoa(i)), Value: b.value}
		if stamper != nil {
			start := len(all)
			all = stamper.Append(all, i)
			msgs[i].Headers = all[start:len(all):len(all)]
		}
	}
	return msgs
}
