package report

import (
	"encoding/json"
	"fmt"
	"io"
)

// MixedFigures are a --mixed-fleet run's: direct workers (old binaries:
// leases through the API, their own producer) next to gateway workers on
// one route pattern, while the admin API walks the pattern observe ->
// gated -> enforced, then the ACL plan is applied.
type MixedFigures struct {
	Pattern       string  `json:"pattern"`
	StateSeconds  float64 `json:"state_seconds"`
	DirectWorkers int     `json:"direct_workers"`
	// Steps are the admin API's answers, in order, as the operator sees
	// them (the harness's one early enforce, right after gated, included).
	Steps []RolloutStep `json:"steps"`
	// States are the figures of each state, from its step's answer to the
	// next state's.
	States []StateFigures `json:"states"`
	// GateToLastLapseS is the time from the gated step's answer to the
	// expiry of the last lease a direct client held (-1: unknown).
	GateToLastLapseS float64 `json:"gate_to_last_lapse_s"`
	// LateWrites are the records the frozen direct worker wrote after it
	// woke, once enforced was answered.
	LateWrites int64 `json:"late_writes"`
	// DirectWriteErrors are direct batches with a record Kafka did not
	// take (before the ACL step), and the first such error.
	DirectWriteErrors int64   `json:"direct_write_errors"`
	FirstWriteError   string  `json:"first_write_error,omitempty"`
	ACL               ACLStep `json:"acl"`
	// Checks are the mixed fleet's verdicts, in MixedChecks order.
	Checks []MixedCheck `json:"checks"`
	Pass   bool         `json:"pass"`
}

// RolloutStep is one admin API call: when it was asked and answered
// (seconds from the start of the run), the HTTP status and the answer's
// body.
type RolloutStep struct {
	Method    string          `json:"method"`
	State     string          `json:"state,omitempty"`
	AskedS    float64         `json:"asked_s"`
	AnsweredS float64         `json:"answered_s"`
	Status    int             `json:"status"`
	Answer    json.RawMessage `json:"answer"`
}

// StateFigures are one rollout state's counts.
type StateFigures struct {
	State string  `json:"state"`
	FromS float64 `json:"from_s"`
	ToS   float64 `json:"to_s"`
	// Grants and renewals recorded in lease_events, by client kind.
	DirectGrants   int64 `json:"direct_grants"`
	DirectRenewals int64 `json:"direct_renewals"`
	FencedGrants   int64 `json:"fenced_grants"`
	FencedRenewals int64 `json:"fenced_renewals"`
	// Direct records written (by the time the write started), kept in
	// the ledger, refused with a receipt.
	DirectRecords int64 `json:"direct_records"`
	DirectKept    int64 `json:"direct_kept"`
	DirectRefused int64 `json:"direct_refused"`
	// Gateway batches acknowledged (by the time of the answer), and of
	// them in the ledger exactly once.
	AckedBatches  int64 `json:"acked_batches"`
	AckedInLedger int64 `json:"acked_in_ledger"`
}

// ACLStep is the final step: enforce's ACL plan applied through the Kafka
// admin API, and the direct principal's next write.
type ACLStep struct {
	Plan []string `json:"plan"`
	// Deleted is the number of ACL bindings the cluster deleted.
	Deleted int `json:"deleted"`
	// NextWrite is the broker's answer to the direct principal's next
	// write (TOPIC_AUTHORIZATION_FAILED, or "delivered").
	NextWrite string `json:"next_write"`
	Error     string `json:"error,omitempty"`
}

// MixedCheck is one check of the mixed fleet.
type MixedCheck struct {
	ID string `json:"id"`
	Invariant
}

// MixedCheckText names a check and says what it holds.
type MixedCheckText struct{ ID, Statement string }

// MixedChecks are the mixed fleet's checks, in report order.
var MixedChecks = []MixedCheckText{
	{"kept", "under observe and gated, every record a direct worker wrote is in ledger_records, marked kept"},
	{"gate", "after gated was answered, no direct client was granted or renewed a lease of the pattern (harness log and lease_events)"},
	{"enforce", "after enforced was answered, every direct record is refused with a receipt (rejected_records) and none is in ledger_records; the frozen worker wrote after it woke"},
	{"ledger", "every acknowledged gateway batch is in the ledger exactly once"},
	{"acl", "after the ACL plan is applied, the broker refuses the direct principal's next write (TOPIC_AUTHORIZATION_FAILED)"},
}

// Check returns the check id of m (the zero check if absent).
func (m *MixedFigures) Check(id string) MixedCheck {
	for _, c := range m.Checks {
		if c.ID == id {
			return c
		}
	}
	return MixedCheck{ID: id}
}

// finish sets the mixed fleet's verdict: every check present and passed.
func (m *MixedFigures) finish() {
	m.Pass = len(m.Checks) == len(MixedChecks)
	for _, c := range m.Checks {
		m.Pass = m.Pass && c.Pass
	}
}

// mixedStatement is check id's statement.
func mixedStatement(id string) string {
	for _, t := range MixedChecks {
		if t.ID == id {
			return t.Statement
		}
	}
	return ""
}

// writeMarkdown writes the mixed fleet's section of the Markdown summary.
func (m *MixedFigures) writeMarkdown(w io.Writer) {
	fmt.Fprintf(w, "mixed fleet on %s: %d direct workers (one frozen past its TTL at gate, waking after enforce), %.1fs per state\n\n",
		m.Pattern, m.DirectWorkers, m.StateSeconds)
	fmt.Fprintln(w, "| check | result | checked | violations |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, c := range m.Checks {
		fmt.Fprintf(w, "| %s: %s | %s | %d | %d |\n", c.ID, mixedStatement(c.ID), passText(c.Pass), c.Checked, c.Violations)
	}
	fmt.Fprintln(w, "\n| state | from s | to s | direct grants / renewals | fenced grants / renewals | direct records | kept | refused | acked batches | in ledger once |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range m.States {
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %d / %d | %d / %d | %d | %d | %d | %d | %d |\n", s.State, s.FromS, s.ToS,
			s.DirectGrants, s.DirectRenewals, s.FencedGrants, s.FencedRenewals, s.DirectRecords, s.DirectKept, s.DirectRefused,
			s.AckedBatches, s.AckedInLedger)
	}
	fmt.Fprintf(w, "\ngate to the last direct lease lapsing: %.2fs; the frozen worker's late records: %d; direct write errors: %d%s\n",
		m.GateToLastLapseS, m.LateWrites, m.DirectWriteErrors, errText(m.FirstWriteError))
	fmt.Fprintf(w, "ACL step: plan %v, %d bindings deleted, the direct principal's next write: %s%s\n\n",
		m.ACL.Plan, m.ACL.Deleted, m.ACL.NextWrite, errText(m.ACL.Error))
	fmt.Fprintln(w, "what the operator saw (admin API):")
	for _, s := range m.Steps {
		fmt.Fprintf(w, "- %.2fs..%.2fs %s %s -> %d %s\n", s.AskedS, s.AnsweredS, s.Method, s.State, s.Status, s.Answer)
	}
	for _, c := range m.Checks {
		for _, ex := range c.Examples {
			fmt.Fprintf(w, "- %s: %s\n", c.ID, ex)
		}
	}
}

func errText(e string) string {
	if e == "" {
		return ""
	}
	return " (" + e + ")"
}
