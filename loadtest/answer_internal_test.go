package loadtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	sdk "github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/verify"
)

// TestTheHarnessClassifiesAsTheSDK: a produce answer, decoded by the
// harness from the wire into the SDK's Problem, is checked against the
// log as a definite refusal exactly when sdk.ProduceOutcome says so. The
// table's want column is docs/api.md's: it fails if the harness keeps a
// classification of its own (the copy it had counted 503 draining as
// unknown) or stops decoding the typed members the layers read.
func TestTheHarnessClassifiesAsTheSDK(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   sdk.Outcome
		layer  string
	}{
		{"committed", 200, `{"offsets":[7]}`, sdk.OutcomeCommitted, layerCommitted},
		{"invalid request", 400, `{"status":400,"code":"invalid_request"}`, sdk.OutcomeRefused, layerSessionCheck},
		{"too many requests", 429, `{"status":429,"code":"too_many_requests"}`, sdk.OutcomeRefused, layerSessionCheck},
		{"fenced", 409, `{"status":409,"code":"fenced"}`, sdk.OutcomeRefused, layerBrokerFence},
		{"expired", 409, `{"status":409,"code":"lease_lost","reason":"expired"}`, sdk.OutcomeRefused, layerLocalDeadline},
		{"misdirected", 421, `{"status":421,"code":"misdirected","holder_url":"http://b"}`, sdk.OutcomeRefused, layerSessionCheck},
		{"generation ended by a fence", 409, `{"status":409,"code":"generation_ended","cause":"fenced"}`, sdk.OutcomeUnknown, layerBrokerFence},
		{"generation ended", 409, `{"status":409,"code":"generation_ended"}`, sdk.OutcomeUnknown, layerOutcomeUnknown},
		{"batch aborted", 503, `{"status":503,"code":"batch_aborted"}`, sdk.OutcomeRefused, layerSessionCheck},
		{"draining", 503, `{"status":503,"code":"draining"}`, sdk.OutcomeRefused, layerSessionCheck},
		{"kafka unavailable", 503, `{"status":503,"code":"kafka_unavailable"}`, sdk.OutcomeUnknown, layerSessionCheck},
		{"internal", 500, `{"status":500,"code":"internal"}`, sdk.OutcomeUnknown, layerSessionCheck},
		{"a proxy's 502", 502, `<html>bad gateway</html>`, sdk.OutcomeUnknown, layerSessionCheck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "2")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			rep := newClient(srv.URL, "", 1).send(context.Background(), "POST", "/v1/leases/shard:1/records", "application/json", []byte(`{}`))
			if got := sdk.ProduceOutcome(rep.status, rep.problem.Code); got != tc.want {
				t.Fatalf("decoded %d %q: the SDK says %v, docs/api.md %v", rep.status, rep.problem.Code, got, tc.want)
			}
			st := newStats(1)
			st.answer("a1", 0, verify.Op{Lease: "shard:1", Token: 1, BatchID: "b"}, rep, false, false)
			checked := slices.ContainsFunc(st.checked, func(a attemptAnswer) bool { return a.id == "a1" && a.definite })
			if checked != (tc.want == sdk.OutcomeRefused) {
				t.Errorf("the harness checks it as definite: %v; the SDK says %v", checked, tc.want)
			}
			if l := layer(rep); l != tc.layer {
				t.Errorf("layer %q, want %q", l, tc.layer)
			}
			if tc.status >= 400 && rep.problem.RetryAfter != 2*time.Second {
				t.Errorf("Retry-After %v, want 2s", rep.problem.RetryAfter)
			}
		})
	}
}

// TestNoAnswerIsOutcomeUnknown: a transport error is never checked as a
// definite refusal.
func TestNoAnswerIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	rep := newClient(srv.URL, "", 1).send(context.Background(), "POST", "/v1/leases/shard:1/records", "application/json", []byte(`{}`))
	if rep.status != 0 || rep.transport == "" {
		t.Fatalf("a closed server answered %d (transport %q)", rep.status, rep.transport)
	}
	st := newStats(1)
	st.answer("a1", 0, verify.Op{Lease: "shard:1", Token: 1, BatchID: "b"}, rep, false, false)
	if len(st.checked) != 0 || layer(rep) != layerTransport || answerCode(rep) != "transport" {
		t.Errorf("no answer: checked %v, layer %q, counted %q", st.checked, layer(rep), answerCode(rep))
	}
}
