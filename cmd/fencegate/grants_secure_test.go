package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/txnmap"
)

// TestFM112_ServeRefusesToStartWithoutAGrant: on the secured Apache Kafka
// broker (kafkatest.SharedSecure: SASL_SSL, the StandardAuthorizer with
// allow.everyone.if.no.acl.found=false), `fencegate serve` as the gateway
// principal proves its grants before anything else uses the cluster
// (brokercheck.Grants: Write in the route topic's authorized operations,
// InitProducerId on a probe id under its prefix). With exactly the grants
// of docs/security.md it passes the check (and stops later, at the
// database this test does not give it); without either grant it exits,
// naming the principal and the grant. Before, it started (or said only
// that the topic could not be read) and answered acquires 503.
func TestFM112_ServeRefusesToStartWithoutAGrant(t *testing.T) {
	s := kafkatest.SharedSecure(t)
	conn := s.SCRAM(kafkatest.PrincipalGateway)
	password := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(password, []byte(s.Password(kafkatest.PrincipalGateway)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FENCEGATE_BARRIER_KEY", "0123456789abcdef0123")
	for _, tc := range []struct {
		name    string
		without int // index into the grants; -1: none left out
		want    string
	}{
		{"the listed grants suffice", -1, ""},
		{"without Write on Topic", 0, "grant it Write on Topic "},
		{"without Write on TransactionalId", 1, "grant it Write on TransactionalId "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := s.NewCluster(t, "grants", 4, s.Conn) // a topic and a prefix of its own: ACLs outlive subtests
			prefix := k.RouterPrefix("test")
			p := kafkatest.PrincipalGateway
			grants := []kafkatest.ACL{
				{Principal: p, Resource: kmsg.ACLResourceTypeTopic, Name: k.Topic, Operation: kmsg.ACLOperationWrite},
				{Principal: p, Resource: kmsg.ACLResourceTypeTransactionalId, Name: txnmap.IDPrefix(prefix), Prefixed: true, Operation: kmsg.ACLOperationWrite},
			}
			if tc.without >= 0 {
				grants = append(grants[:tc.without:tc.without], grants[tc.without+1:]...)
			}
			s.Grant(t, grants...)
			cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
			yaml := fmt.Sprintf("transactional_id_prefix: %s\nroutes:\n  - {pattern: \"shard:*\", topic: %s, partitions: 4}\n"+
				"clients:\n  - {name: ops, token_sha256: %s, allow: [\"*\"]}\n", prefix, k.Topic, gateway.HashToken("ops-token"))
			if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			code := run(context.Background(), []string{"serve", "--config", cfg, "--kafka-brokers", conn.Brokers,
				"--kafka-security-protocol", "SASL_SSL", "--kafka-sasl-mechanism", "SCRAM-SHA-512",
				"--kafka-sasl-user", p, "--kafka-sasl-password-file", password, "--kafka-ca-file", conn.CAFile,
				"--database-url", "postgres://nobody@127.0.0.1:1/none"}, &bytes.Buffer{}, &stderr)
			last := strings.TrimSpace(lastLine(stderr.String()))
			t.Logf("exit %d: %s", code, last)
			switch {
			case tc.want == "" && (code == 0 || strings.Contains(stderr.String(), "refused the principal") || !strings.Contains(last, "user=nobody")):
				t.Fatalf("serve with the listed grants: exit %d, want it past the grants' check, stopped at the database:\n%s", code, stderr.String())
			case tc.want != "" && (code == 0 || !strings.Contains(last, tc.want) || !strings.Contains(last, "User:"+p)):
				t.Fatalf("serve %s: exit %d, want it to refuse naming %q and User:%s:\n%s", tc.name, code, tc.want, p, stderr.String())
			}
		})
	}
}
