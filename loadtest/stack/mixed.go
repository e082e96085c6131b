package stack

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/rollout"
)

// The mixed fleet's clients (WithMixedFleet): besides the fenced workers'
// clients, a direct client (an old binary: leases through the API, its
// own producer as DirectPrincipal) and an admin client that walks the
// rollout through the admin API.
const (
	DirectClient = "indexer-v1"
	DirectToken  = "loadtest-direct-token"
	AdminClient  = "ops"
	AdminToken   = "loadtest-admin-token"
	// DirectPrincipal is the direct client's principal on the embedded
	// broker, its kafka_principal in the config.
	DirectPrincipal = "User:" + directUser
	// MixedPattern is the route pattern the mixed fleet shares.
	MixedPattern = "shard:*"
)

// The SASL users of the mixed fleet's broker: the harness, the gateway and
// the materializer connect as the superuser (ACLs do not apply to it);
// the direct workers as directUser, whose Write on the lease topic is the
// ACL that enforce's plan removes.
const (
	scram          = "SCRAM-SHA-256"
	superUser      = "loadtest-admin"
	superPassword  = "loadtest-admin-secret"
	directUser     = "indexer"
	directPassword = "indexer-secret"
)

// WithMixedFleet registers the mixed fleet's clients (DirectClient of kind
// direct with DirectPrincipal, AdminClient with admin: true) next to the
// fenced ones, serves the admin API, and runs the embedded broker with
// SASL and ACLs: the direct principal may write and describe the lease
// topic until the ACL plan is applied. In-process gateway only
// (StartEmbedded).
func WithMixedFleet() StackOption {
	return func(s *Stack) error { s.mixed = true; return nil }
}

// MixedFleet reports whether the stack was started WithMixedFleet.
func (s *Stack) MixedFleet() bool { return s.mixed }

// errMixedInProcess refuses the mixed fleet on stacks other than
// StartEmbedded's.
var errMixedInProcess = errors.New("the mixed fleet needs the embedded stack with the in-process gateway (--embedded, one replica, no --gateway-child or --separate-processes)")

// DirectKafka is how the direct workers reach the cluster: as
// DirectPrincipal.
func (s *Stack) DirectKafka() kafkaconn.Config {
	c := s.Kafka
	c.SASLMechanism, c.SASLUser, c.SASLPassword = scram, directUser, directPassword
	return c
}

// mixedClusterOpts are the broker options of the mixed fleet.
func mixedClusterOpts() []kfake.Opt {
	allow := func(op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: LeaseTopic,
			Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	return []kfake.Opt{kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser(scram, superUser, superPassword),
		kfake.User(scram, directUser, directPassword, allow(kmsg.ACLOperationWrite), allow(kmsg.ACLOperationDescribe))}
}

// superuserConn is the stack's connection on the mixed fleet's broker.
func superuserConn(brokers string) kafkaconn.Config {
	return kafkaconn.Config{Brokers: brokers, SASLMechanism: scram, SASLUser: superUser, SASLPassword: superPassword}
}

// mixedClientsYAML are the config lines of the mixed fleet's clients.
func mixedClientsYAML(b *strings.Builder) {
	fmt.Fprintf(b, "  - {name: %s, token_sha256: %s, allow: [%q], kind: %s, kafka_principal: %q}\n",
		DirectClient, gateway.HashToken(DirectToken), MixedPattern, fileconfig.KindDirect, DirectPrincipal)
	fmt.Fprintf(b, "  - {name: %s, token_sha256: %s, allow: [], admin: true}\n", AdminClient, gateway.HashToken(AdminToken))
}

// serveAdmin serves the admin API on api, as `fencegate serve` does.
func (s *Stack) serveAdmin(api *gateway.Server, store *leasestore.Store, auth *gateway.Authenticator, clients []fileconfig.Client) error {
	signer, err := barrier.NewSigner([]byte(barrierKey))
	if err != nil {
		return err
	}
	api.Admin(&rollout.Rollouts{Store: store, Router: s.Router, Signer: signer, Kafka: s.Kafka,
		DirectClients: auth.DirectClients()}, clients)
	return nil
}
