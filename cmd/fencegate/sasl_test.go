package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/kafkaconn"
)

// TestFM32_ServeRefusesSASLMisconfiguration: over SASL_SSL with SCRAM,
// serve and materialize refuse to start with a user but no password
// (naming it) and with a password the broker refuses (naming the login),
// where serve used to start and answer only "context deadline exceeded".
func TestFM32_ServeRefusesSASLMisconfiguration(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	k := kafkatest.StartTLS(t, kafkatest.NewCA(t, "brokers"), kafkatest.TLSOptions{
		SASL: kafkaconn.MechanismSCRAMSHA512, User: "gateway", Password: "gateway-secret"}, "shard-output", 16)
	if k.External() {
		t.Skip(kafkatest.SkipFaultInjection) // kfake's way of refusing a login
	}
	for _, c := range []struct{ password, want string }{
		{"", `with SASL user "gateway" but no SASL password`},
		{"not-the-password", `SASL SCRAM-SHA-512 as "gateway" refused`},
	} {
		f := placementServeFlags(db, k, routeConfig(t, k.Topic, 16))
		f.kafka = k.Conn
		f.saslMech, f.saslUser, f.saslPassword = k.Conn.SASLMechanism, k.Conn.SASLUser, c.password
		if err := serveOnce(t, f); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "not-the-password") {
			t.Errorf("serve with password %q: %v", c.password, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := materialize(ctx, materializeFlags{listen: "127.0.0.1:0", commonFlags: f.commonFlags}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("materialize with password %q: %v", c.password, err)
		}
	}
}
