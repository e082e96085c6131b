package rollout

import (
	"context"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/kafkaconn"
)

// ApplyACLPlan removes the plan's ACLs through the Kafka admin API (the
// operator's principal needs Alter on the cluster) and returns how many
// bindings the cluster deleted. A change without a principal is refused:
// removing every principal's Write would stop the gateway too.
func ApplyACLPlan(ctx context.Context, conn kafkaconn.Config, plan []ACLChange) (int, error) {
	var filters kafka.ACLBindingFilters
	for _, c := range plan {
		if c.Principal == "" {
			return 0, fmt.Errorf("client %q has no kafka_principal: name it in the config, or remove its ACLs by hand", c.Client)
		}
		filters = append(filters, kafka.ACLBindingFilter{Type: kafka.ResourceTopic, Name: c.Topic,
			ResourcePatternType: kafka.ResourcePatternTypeLiteral, Principal: c.Principal, Host: "*",
			Operation: kafka.ACLOperationWrite, PermissionType: kafka.ACLPermissionTypeAllow})
	}
	if len(filters) == 0 {
		return 0, nil
	}
	cm, err := conn.ConfigMap()
	if err != nil {
		return 0, err
	}
	// No go.logs.channel.enable: the admin client refuses that key.
	admin, err := kafka.NewAdminClient(&cm)
	if err != nil {
		return 0, err
	}
	defer admin.Close()
	res, err := admin.DeleteACLs(ctx, filters)
	if err != nil {
		return 0, fmt.Errorf("delete ACLs: %w", err)
	}
	n := 0
	for i, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			return n, fmt.Errorf("delete ACLs of %s: %v", plan[i].Principal, r.Error)
		}
		n += len(r.ACLBindings)
	}
	return n, nil
}
