package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/rollout"
)

// TestApplyACLPlanDeletesTheDirectPrincipalsWrite: against a broker with
// ACLs, applying a plan deletes the direct principal's Write binding on
// the topic once; applied again it deletes nothing.
func TestApplyACLPlanDeletesTheDirectPrincipalsWrite(t *testing.T) {
	t.Parallel()
	const scram, topic = "SCRAM-SHA-256", "acl-plan"
	acl := func(op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	k := kafkatest.Start(t, topic, 1, kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser(scram, "admin", "admin-secret"),
		kfake.User(scram, "indexer", "indexer-secret", acl(kmsg.ACLOperationWrite), acl(kmsg.ACLOperationDescribe)))
	conn := k.Conn
	conn.SASLMechanism, conn.SASLUser, conn.SASLPassword = scram, "admin", "admin-secret"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plan := []rollout.ACLChange{{Client: "indexer-v1", Principal: "User:indexer", Topic: topic, Operation: "Write"}}
	n, err := rollout.ApplyACLPlan(ctx, conn, plan)
	if err != nil || n != 1 {
		t.Fatalf("ApplyACLPlan: %d bindings deleted, %v; want 1", n, err)
	}
	if n, err := rollout.ApplyACLPlan(ctx, conn, plan); err != nil || n != 0 {
		t.Fatalf("ApplyACLPlan again: %d bindings deleted, %v; want 0", n, err)
	}
}
