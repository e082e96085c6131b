package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/txnmap"
)

// ErrKafkaDenied marks a request the cluster's authorizer refused to the
// gateway's principal: an ACL that docs/security.md lists is missing
// (FM106). A handover it ends is answered 503 kafka_unavailable
// (explainHandover), never fenced: the grant of an operator mends it.
var ErrKafkaDenied = errors.New("the gateway's Kafka principal was refused")

// denied returns an ErrKafkaDenied naming the grant that is missing for
// topic or transactional id txnID (under prefix), or nil when the authorizer allows
// both (as far as can be asked without writing: Write on the topic, and
// Describe on the transactional id, which Write implies).
func (in *inspector) denied(ctx context.Context, topic, txnID, prefix string) error {
	if err := in.topicDenied(ctx, []string{topic}); err != nil {
		return err
	}
	return in.txnDenied(ctx, txnID, prefix)
}

// topicDenied asks for the topics' metadata with the principal's
// authorized operations (Metadata v8+) and names the first topic the
// principal may not write.
func (in *inspector) topicDenied(ctx context.Context, topics []string) error {
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, in.cl)
	if err != nil {
		return nil // not an answer about rights; readiness reports it
	}
	return writeDenied(resp)
}

// writeDenied names the first topic of a metadata answer (asked with
// IncludeTopicAuthorizedOperations) that the principal may not write, by
// the rule serve's start and verify-broker apply (kafkaconn.TopicAllows).
func writeDenied(resp *kmsg.MetadataResponse) error {
	for _, t := range resp.Topics {
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		}
		if !kafkaconn.TopicAllows(t, kmsg.ACLOperationWrite) {
			return fmt.Errorf("%w: it may not write topic %s: grant it Write on Topic %s (docs/security.md)", ErrKafkaDenied, name, name)
		}
	}
	return nil
}

// txnDenied asks DescribeTransactions for id, which answers
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED to a principal with neither
// Describe nor Write on it; prefix is what the grant names.
func (in *inspector) txnDenied(ctx context.Context, id, prefix string) error {
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{id}
	resp, err := req.RequestWith(ctx, in.cl)
	switch {
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		// franz-go asks FindCoordinator first, which the authorizer refuses.
		return txnDeniedError(prefix)
	case err != nil:
		return nil
	}
	for _, s := range resp.TransactionStates {
		if errors.Is(kerr.ErrorForCode(s.ErrorCode), kerr.TransactionalIDAuthorizationFailed) {
			return txnDeniedError(prefix)
		}
	}
	return nil
}

func txnDeniedError(prefix string) error {
	return fmt.Errorf("%w: it may not use the transactional ids %s: grant it Write on TransactionalId %s, pattern prefixed (docs/security.md)",
		ErrKafkaDenied, prefix, prefix)
}

// prefixDenied is readiness's check of the transactional ids under the
// gateway's prefix (the topics' Write is checked with their partitions,
// in ping).
func (in *inspector) prefixDenied(ctx context.Context, prefix string) error {
	p := txnmap.IDPrefix(prefix)
	return in.txnDenied(ctx, p, p)
}

// librdkafkaDenied reports whether a librdkafka error is the authorizer's
// refusal.
func librdkafkaDenied(err error) (kafka.ErrorCode, bool) {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return 0, false
	}
	switch kerr.Code() {
	case kafka.ErrTopicAuthorizationFailed, kafka.ErrTransactionalIDAuthorizationFailed,
		kafka.ErrClusterAuthorizationFailed, kafka.ErrGroupAuthorizationFailed:
		return kerr.Code(), true
	}
	return 0, false
}

// explainHandover names the cause of a failed handover that the cluster
// refused to the gateway's principal, and counts it
// (fencegate.kafka.refused): a login refused or a token not given
// (kafkaconn.ErrHandshake, kafkaconn.ErrTokenEndpoint), or a missing ACL
// (ErrKafkaDenied). librdkafka reports these only as a transport failure
// or a purged message, so the cluster is asked again. Other errors pass
// unchanged.
func (g *Gateway) explainHandover(place txnmap.Placement, err error) error {
	var e *Error
	if err == nil || errors.As(err, &e) && e.Code != CodeKafkaUnavailable {
		return err
	}
	// The handover's own budget may be spent: the question has its own.
	ctx, cancel := context.WithTimeout(context.Background(), explainTimeout)
	defer cancel()
	reason, why := "login", g.insp.login(ctx)
	if !errors.Is(why, kafkaconn.ErrHandshake) && !errors.Is(why, kafkaconn.ErrTokenEndpoint) {
		reason, why = "acl", g.insp.denied(ctx, place.Topic, place.TransactionalID, txnmap.IDPrefix(g.router.Prefix()))
		if code, ok := librdkafkaDenied(err); ok && code == kafka.ErrTransactionalIDAuthorizationFailed {
			why = txnDeniedError(txnmap.IDPrefix(g.router.Prefix()))
		}
	}
	if why == nil {
		return err
	}
	g.met.refused.Add(context.Background(), 1, metric.WithAttributes(attribute.String("reason", reason)))
	return fmt.Errorf("%w: %w (the handover failed: %v)", ErrKafkaUnavailable, why, err)
}

// explainTimeout bounds explainHandover's questions to the cluster.
const explainTimeout = 5 * time.Second

// refusedReasons are the reason attribute's values of fencegate.kafka.refused.
var refusedReasons = []string{"login", "acl"}

// login asks the cluster for metadata, naming a refused TLS or SASL
// handshake or a token the identity provider did not give.
func (in *inspector) login(ctx context.Context) error {
	_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, in.cl)
	return in.auth.Explain(in.conn, err)
}
