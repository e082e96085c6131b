package kafkatest

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/kafkaconn"
)

// GrowTopic raises topic to partitions partitions (CreatePartitions, the
// ordinary Kafka operation) and waits until every partition has a leader.
func GrowTopic(conn kafkaconn.Config, topic string, partitions int32) error {
	cl, err := client(conn)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, partitions
	req.Topics, req.TimeoutMillis = append(req.Topics, rt), 30000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("grow topic %s to %d partitions: %w", topic, partitions, err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			return fmt.Errorf("grow topic %s to %d partitions: %w", topic, partitions, err)
		}
	}
	if err := conn.WaitTopicReady(ctx, topic, partitions); err != nil {
		return fmt.Errorf("topic %s grown to %d partitions but %w", topic, partitions, err)
	}
	return nil
}
