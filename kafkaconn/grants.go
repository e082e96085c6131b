package kafkaconn

import (
	"time"

	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Grant is one right a principal needs on the cluster, named as the ACL
// that gives it (docs/security.md lists each component's).
type Grant struct {
	Op       kmsg.ACLOperation
	Resource kmsg.ACLResourceType
	Name     string
	// Prefixed: the ACL's pattern is prefixed (Name is the prefix).
	Prefixed bool
}

// String is the grant as an operator gives it: "Read on Group g",
// "Write on TransactionalId p, pattern prefixed".
func (g Grant) String() string {
	s := fmt.Sprintf("%s on %s %s", camel(g.Op.String()), camel(g.Resource.String()), g.Name)
	if g.Prefixed {
		s += ", pattern prefixed"
	}
	return s
}

// camel turns kmsg's READ, TRANSACTIONAL_ID into Read, TransactionalId,
// as the ACL tools name them.
func camel(s string) string {
	var b strings.Builder
	for _, w := range strings.Split(strings.ToLower(s), "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// ErrMissingGrant marks a right the cluster's authorizer refused the
// connection's principal.
var ErrMissingGrant = errors.New("kafka refused the principal")

// MissingGrantError names the grants the authorizer refused, and the
// principal, for the operator who must grant them.
type MissingGrantError struct {
	Principal string
	Grants    []Grant
}

// Error names the principal and each grant refused.
func (e *MissingGrantError) Error() string {
	names := make([]string, len(e.Grants))
	for i, g := range e.Grants {
		names[i] = g.String()
	}
	return fmt.Sprintf("kafka refused the principal %s: grant it %s (docs/security.md)", e.Principal, strings.Join(names, "; "))
}

// Unwrap makes errors.Is(err, ErrMissingGrant) hold.
func (e *MissingGrantError) Unwrap() error { return ErrMissingGrant }

// Missing asks the cluster which of grants the connection's principal
// lacks, by what the authorizer answers to the principal itself, never by
// reading ACLs (DescribeAcls needs Describe on the cluster, which no
// component holds):
//
//   - an operation on a topic: the topic's authorized operations in a
//     Metadata answer (KIP-430, Metadata v8+); a topic the principal may
//     not describe is refused with TOPIC_AUTHORIZATION_FAILED;
//   - any operation on a group: FindCoordinator for it, which the
//     authorizer refuses without Describe on the group. Read implies
//     Describe, so it proves what a consumer that only assigns needs;
//     Read itself is judged at a member's JoinGroup or commit;
//   - any operation on a transactional id: InitProducerId on probeID
//     (under the grant's prefix; empty: the grant is not asked), which
//     needs Write on it. It bumps probeID's epoch and nothing else.
//
// A grant it cannot ask about (another resource, or a topic whose
// authorized operations the broker does not report) is taken as held.
// It returns nil or a *MissingGrantError with the grants refused; any
// other error is not an answer about rights.
func Missing(ctx context.Context, cl *kgo.Client, principal, probeID string, grants []Grant) error {
	var missing []Grant
	topics, err := topicOps(ctx, cl, grants)
	if err != nil {
		return err
	}
	for _, g := range grants {
		held := true
		switch g.Resource {
		case kmsg.ACLResourceTypeTopic:
			t, ok := topics[g.Name]
			held = ok && TopicAllows(t, g.Op)
		case kmsg.ACLResourceTypeGroup:
			held, err = groupHeld(ctx, cl, g.Name)
		case kmsg.ACLResourceTypeTransactionalId:
			held, err = txnHeld(ctx, cl, probeID)
		}
		if err != nil {
			return err
		}
		if !held {
			missing = append(missing, g)
		}
	}
	if len(missing) > 0 {
		return &MissingGrantError{Principal: principal, Grants: missing}
	}
	return nil
}

// TopicAllows is the one rule for a topic's grant, read from a Metadata
// answer asked with IncludeTopicAuthorizedOperations (KIP-430): the
// principal may do op on t unless the topic was refused
// (TOPIC_AUTHORIZATION_FAILED: no Describe) or its authorized operations
// lack op. Operations not reported (a negative set: before Metadata v8,
// or a broker without them) are taken as allowing op: the produce itself
// then answers.
func TopicAllows(t kmsg.MetadataResponseTopic, op kmsg.ACLOperation) bool {
	if errors.Is(kerr.ErrorForCode(t.ErrorCode), kerr.TopicAuthorizationFailed) {
		return false
	}
	return t.AuthorizedOperations < 0 || t.AuthorizedOperations&(1<<int(op)) != 0
}

// topicOps returns the Metadata answer for each topic grants name, for
// TopicAllows; a topic the answer does not name is absent.
func topicOps(ctx context.Context, cl *kgo.Client, grants []Grant) (map[string]kmsg.MetadataResponseTopic, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	req.AllowAutoTopicCreation = false
	seen := map[string]bool{}
	for _, g := range grants {
		if g.Resource != kmsg.ACLResourceTypeTopic || seen[g.Name] {
			continue
		}
		seen[g.Name] = true
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(g.Name)
		req.Topics = append(req.Topics, rt)
	}
	out := map[string]kmsg.MetadataResponseTopic{}
	if len(req.Topics) == 0 {
		return out, nil
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	for _, t := range resp.Topics {
		if t.Topic != nil {
			out[*t.Topic] = t
		}
	}
	return out, nil
}

// groupHeld asks FindCoordinator for group: refused without Describe.
func groupHeld(ctx context.Context, cl *kgo.Client, group string) (bool, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType = 0 // group
	req.CoordinatorKey, req.CoordinatorKeys = group, []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return false, err
	}
	codes := []int16{resp.ErrorCode}
	for _, c := range resp.Coordinators {
		codes = append(codes, c.ErrorCode)
	}
	for _, c := range codes {
		if errors.Is(kerr.ErrorForCode(c), kerr.GroupAuthorizationFailed) {
			return false, nil
		}
	}
	return true, nil
}

// probeTimeout is the transaction timeout the probe's InitProducerId
// asks: below any broker's transaction.max.timeout.ms that can run a
// gateway at all, so the answer is about the grant, not the timeout (the
// probe never opens a transaction; verify-broker judges the timeout).
const probeTimeout = time.Second

// txnHeld asks InitProducerId for probeID: refused without Write on it.
func txnHeld(ctx context.Context, cl *kgo.Client, probeID string) (bool, error) {
	if probeID == "" {
		return true, nil
	}
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = kmsg.StringPtr(probeID)
	req.TransactionTimeoutMillis = int32(probeTimeout.Milliseconds())
	req.ProducerID, req.ProducerEpoch = -1, -1
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		return false, nil
	}
	return true, err
}

// Principal names the principal the brokers see for c, as an operator
// names it in an ACL: User:<SASL user> (with OAUTHBEARER the client id,
// which is the token's subject with the usual issuers), the client
// certificate's mapped name, or User:ANONYMOUS.
func (c Config) Principal() string {
	switch {
	case c.SASL():
		return "User:" + c.SASLUser
	case c.CertFile != "":
		return "of the client certificate " + c.CertFile + " (as the brokers' ssl.principal.mapping.rules map it)"
	}
	return "User:ANONYMOUS"
}
