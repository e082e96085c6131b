package materializer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// noteDenied records a consumer error that is the cluster's authorizer
// refusing the materializer's principal (FM107): librdkafka reports it as
// an error event and goes on retrying, so without this the materializer
// would run, ready, and apply nothing. Ready then fails naming the grant,
// fencegate.materializer.kafka.refused counts it, and it is logged at
// error level; the first record consumed clears it. It reports whether e
// was such a refusal.
func (m *Materializer) noteDenied(e kafka.Error) bool {
	var grant string
	switch e.Code() {
	case kafka.ErrTopicAuthorizationFailed:
		grant = "Read on Topic " + strings.Join(m.topics(), ", ")
	case kafka.ErrGroupAuthorizationFailed:
		grant = "Read on Group " + m.cfg.GroupID
	default:
		return false
	}
	m.setDenied(fmt.Errorf("kafka refused the materializer's principal (%v): grant it %s (docs/security.md)", e, grant))
	return true
}

// setDenied records err as the materializer's refusal.
func (m *Materializer) setDenied(err error) {
	m.deniedMu.Lock()
	first := m.denied == nil
	m.denied = err
	m.deniedMu.Unlock()
	m.met.refused.Add(context.Background(), 1)
	if first {
		m.log.Error("kafka refused the materializer's principal: nothing is applied until it is granted", "error", err)
	}
}

// askDenied asks the cluster whether the materializer's principal may
// read its topics (Metadata with the authorized operations, v8+), and
// records a refusal (setDenied). librdkafka waits in silence on a
// partition it was assigned but may not read, so Run asks at start and
// again, while refused, every deniedRecheck without records.
func (m *Materializer) askDenied(ctx context.Context) {
	opts, err := m.cfg.Kafka.KgoOpts()
	if err != nil {
		return
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	for _, t := range m.topics() {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return // not an answer about rights
	}
	for _, t := range resp.Topics {
		if errors.Is(kerr.ErrorForCode(t.ErrorCode), kerr.TopicAuthorizationFailed) ||
			t.AuthorizedOperations >= 0 && t.AuthorizedOperations&(1<<int(kmsg.ACLOperationRead)) == 0 {
			m.setDenied(fmt.Errorf("kafka refused the materializer's principal: it may not read topic %s: grant it Read on Topic %s (docs/security.md)",
				*t.Topic, *t.Topic))
			return
		}
	}
	m.clearDenied()
}

// deniedRecheck is how often Run asks again while refused.
const deniedRecheck = 5 * time.Second

func (m *Materializer) clearDenied() {
	m.deniedMu.Lock()
	m.denied = nil
	m.deniedMu.Unlock()
}

// deniedErr is the last refusal noteDenied recorded, nil once a record
// was consumed since.
func (m *Materializer) deniedErr() error {
	m.deniedMu.Lock()
	defer m.deniedMu.Unlock()
	return m.denied
}

// topics are the routes' topics, each once.
func (m *Materializer) topics() []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range m.router.Routes() {
		if !seen[r.Topic] {
			seen[r.Topic] = true
			out = append(out, r.Topic)
		}
	}
	return out
}
