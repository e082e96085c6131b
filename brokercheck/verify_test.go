package brokercheck_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/brokercheck"
	"github.com/fencegate/fencegate/internal/kafkatest"
)

// report runs Verify against k with the gateway's defaults and logs the
// table.
func report(t *testing.T, k *kafkatest.Cluster) brokercheck.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep := brokercheck.Verify(ctx, brokercheck.Config{Conn: k.Conn, Topics: []string{k.Topic},
		TransactionTimeout: 10 * time.Second, ParkAfter: 30 * time.Second, Prefix: "vb"})
	var b bytes.Buffer
	_ = rep.WriteTable(&b)
	t.Logf("verify-broker on %s:\n%s", k.Brokers, b.String())
	return rep
}

func TestScratchRealShared(t *testing.T) {
	k := kafkatest.StartReal(t, "verify-route", 2)
	report(t, k)
}
