package loadtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/loadtest"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// TestMixedFleetShort is --mixed-fleet in CI: direct workers (old
// binaries, one frozen past its TTL at gate) beside gateway workers on
// shard:*, the rollout walked observe -> gated -> enforced through the
// admin API, then the ACL plan applied. Every check of the report must
// pass, with something checked in each: the direct records under observe
// and gated kept, no direct grant or renewal after gated, the frozen
// worker's late records refused with receipts and out of the ledger, the
// acknowledged gateway batches in the ledger once, and the broker refusing
// the direct principal after the ACL plan. The checks' failing side is
// TestMixedChecksFail.
func TestMixedFleetShort(t *testing.T) {
	if kafkatest.External() {
		t.Skip("the mixed fleet needs kfake's SASL users and ACLs")
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	stk, err := stack.StartEmbedded(ctx, pgtest.ServerURL(), log, stack.WithMixedFleet())
	if err != nil {
		t.Fatal(err)
	}
	defer stk.Close()
	sc := loadtest.Defaults()
	sc.MixedFleet, sc.Leases, sc.WorkersPerLease = true, 4, 1
	sc.BatchSize, sc.RecordSize, sc.Rate = 10, 64, 20
	sc.TTL, sc.StateDuration, sc.Duration = time.Second, 3*time.Second, 9*time.Second
	rep, err := loadtest.Run(ctx, stk, sc, loadtest.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	m := rep.Mixed
	if m == nil || !rep.Pass {
		t.Fatalf("mixed fleet failed:\n%s", rep.Markdown())
	}
	for _, c := range report.MixedChecks {
		if got := m.Check(c.ID); !got.Pass || got.Checked == 0 {
			t.Errorf("check %s: pass %v, checked %d", c.ID, got.Pass, got.Checked)
		}
	}
	if len(m.States) != 3 || m.States[0].DirectKept == 0 || m.States[2].DirectRefused == 0 || m.LateWrites == 0 {
		t.Errorf("states %+v, late writes %d: want kept records under observe and refused ones under enforced", m.States, m.LateWrites)
	}
	if g := m.States[1]; g.DirectGrants+g.DirectRenewals != 0 || m.States[2].DirectGrants+m.States[2].DirectRenewals != 0 {
		t.Errorf("direct grants or renewals after gate: %+v", m.States[1:])
	}
	var j, h bytes.Buffer
	if err := rep.WriteJSON(&j); err != nil {
		t.Fatal(err)
	}
	var back report.Report
	if err := json.Unmarshal(j.Bytes(), &back); err != nil || back.Mixed == nil || len(back.Mixed.Checks) != len(report.MixedChecks) {
		t.Fatalf("JSON report: %v, mixed %+v", err, back.Mixed)
	}
	if err := rep.WriteHTML(&h); err != nil || !bytes.Contains(h.Bytes(), []byte("Mixed fleet on shard:*")) {
		t.Fatalf("HTML report: %v", err)
	}
}
