package materializer

import (
	"context"
	"errors"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/kafkaconn"
)

// The materializer's refusals (FM107, FM110). The cluster's answer to
// askDenied is the one authority on whether a grant is missing: Ready
// fails naming it, fencegate.materializer.kafka.missing_grant is 1 for
// it, and a line at error level names it, from that answer until an
// answer that the grant is back. librdkafka's own refusals (an error
// event, a fetch error) only bring the next question forward: they come
// and go with its retries, and a record consumed says nothing about the
// group, so letting either set or clear the refusal made readiness flap
// (FM110).

// grants are the ledger sink's grants (docs/security.md): Read on each
// route's topic and on its consumer group.
func (m *Materializer) grants() []kafkaconn.Grant {
	var out []kafkaconn.Grant
	for _, t := range m.topics() {
		out = append(out, kafkaconn.Grant{Op: kmsg.ACLOperationRead, Resource: kmsg.ACLResourceTypeTopic, Name: t})
	}
	return append(out, kafkaconn.Grant{Op: kmsg.ACLOperationRead, Resource: kmsg.ACLResourceTypeGroup, Name: m.cfg.GroupID})
}

// noteDenied reports whether a consumer error is the cluster's authorizer
// refusing the materializer's principal, and if so asks for the next
// question to the cluster (askDue) and keeps the error in case the
// cluster cannot be asked. topic is the partition's whose fetch failed,
// "" for an error event (which names none: the first route's stands in).
func (m *Materializer) noteDenied(e kafka.Error, topic string) bool {
	grants := m.grants()
	g := grants[len(grants)-1] // the group's
	switch e.Code() {
	case kafka.ErrTopicAuthorizationFailed:
		g = grants[0]
		if topic != "" {
			g.Name = topic
		}
	case kafka.ErrGroupAuthorizationFailed:
	default:
		return false
	}
	m.hint.Store(&kafkaconn.MissingGrantError{Principal: m.cfg.Kafka.Principal(), Grants: []kafkaconn.Grant{g}})
	return true
}

// askDue reports whether Run asks the cluster again: while refused, or
// after a refusal of librdkafka's, at most once every deniedRecheck.
func (m *Materializer) askDue(asked time.Time) bool {
	if time.Since(asked) < deniedRecheck {
		return false
	}
	return m.deniedErr() != nil || m.hint.Load() != nil
}

// askDenied asks the cluster whether the materializer's principal holds
// its grants (kafkaconn.Missing: its topics' authorized operations, and
// FindCoordinator for its group) and records the answer. librdkafka
// waits in silence on a partition it was assigned but may not read, so
// Run asks at start, then as askDue says. Without an answer, a refusal
// librdkafka reported since stands in for one.
func (m *Materializer) askDenied(ctx context.Context) {
	hint := m.hint.Swap(nil)
	err := m.missing(ctx)
	var refused *kafkaconn.MissingGrantError
	switch {
	case errors.As(err, &refused):
		m.setDenied(refused)
	case err == nil:
		m.clearDenied()
	case hint != nil:
		m.setDenied(hint)
	}
}

func (m *Materializer) missing(ctx context.Context) error {
	return askGrants(ctx, m.cfg.Kafka, "", m.grants())
}

// askGrants asks the cluster over conn which of grants its principal
// lacks (kafkaconn.Missing; probeID for a transactional id's), for at most
// askTimeout.
func askGrants(ctx context.Context, conn kafkaconn.Config, probeID string, grants []kafkaconn.Grant) error {
	opts, err := conn.KgoOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	return kafkaconn.Missing(ctx, cl, conn.Principal(), probeID, grants)
}

// askTimeout bounds one askGrants.
const askTimeout = 10 * time.Second

// deniedRecheck is how often Run asks again while refused.
const deniedRecheck = 5 * time.Second

// setDenied records refused as the materializer's refusal and counts it;
// the first refusal, or one naming other grants, is logged at error level.
func (m *Materializer) setDenied(refused *kafkaconn.MissingGrantError) {
	m.deniedMu.Lock()
	changed := m.denied == nil || m.denied.Error() != refused.Error()
	m.denied = refused
	m.deniedMu.Unlock()
	m.met.refused.Add(context.Background(), 1)
	if changed {
		m.log.Error("kafka refused the materializer's principal a grant docs/security.md lists: not ready until it is granted", "error", refused)
	}
}

func (m *Materializer) clearDenied() {
	m.deniedMu.Lock()
	was := m.denied
	m.denied = nil
	m.deniedMu.Unlock()
	if was != nil {
		m.log.Info("kafka grants the materializer's principal what it needs again", "was", was)
	}
}

// deniedErr is the refusal the cluster's last answer gave, nil when it
// granted everything.
func (m *Materializer) deniedErr() *kafkaconn.MissingGrantError {
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
