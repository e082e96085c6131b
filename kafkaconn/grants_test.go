package kafkaconn_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/kafkaconn"
)

// TestTopicAllows holds the one topic-grant rule that serve's start,
// verify-broker (Missing) and the gateway's readiness and handover
// explanation (gateway's writeDenied) share: a topic refused outright, or
// whose reported operations lack the one asked, does not allow it;
// operations not reported do.
func TestTopicAllows(t *testing.T) {
	write, read := kmsg.ACLOperationWrite, kmsg.ACLOperationRead
	ops := func(o ...kmsg.ACLOperation) int32 {
		var set int32
		for _, op := range o {
			set |= 1 << int(op)
		}
		return set
	}
	for _, c := range []struct {
		name  string
		code  int16
		ops   int32
		op    kmsg.ACLOperation
		allow bool
	}{
		{"write among the operations", 0, ops(kmsg.ACLOperationDescribe, write), write, true},
		{"write missing", 0, ops(kmsg.ACLOperationDescribe, read), write, false},
		{"no operation at all", 0, 0, write, false},
		{"read asked, read held", 0, ops(read), read, true},
		{"operations not reported", 0, -2147483648, write, true},
		{"topic refused, operations not reported", kerr.TopicAuthorizationFailed.Code, -2147483648, write, false},
		{"topic refused, operations claiming write", kerr.TopicAuthorizationFailed.Code, ops(write), write, false},
		{"another error, operations not reported", kerr.UnknownTopicOrPartition.Code, -2147483648, write, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := kmsg.NewMetadataResponseTopic()
			topic.Topic = kmsg.StringPtr("t")
			topic.ErrorCode, topic.AuthorizedOperations = c.code, c.ops
			if got := kafkaconn.TopicAllows(topic, c.op); got != c.allow {
				t.Errorf("TopicAllows(%s, code %d, ops %b) = %v, want %v", c.op, c.code, c.ops, got, c.allow)
			}
		})
	}
}
