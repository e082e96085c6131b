package gateway

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/fencegate/fencegate/leasestore"
)

// TestEveryCodesProblemKeepsItsMembers renders the problem of every code,
// built by the function that builds it in the gateway, and compares all its
// members, names and values, with the documents the gateway sent before
// the members were typed fields: the wire format did not change.
func TestEveryCodesProblemKeepsItsMembers(t *testing.T) {
	expires := time.Date(2026, 1, 1, 0, 0, 3, 500, time.UTC)
	base := func(c Code, detail string, extra map[string]any) map[string]any {
		status := statusOf(c)
		m := map[string]any{"type": "https://fencegate.dev/problems/" + string(c), "title": http.StatusText(status),
			"status": float64(status), "code": string(c), "detail": detail}
		maps.Copy(m, extra)
		return m
	}
	fenced := errorf(CodeFenced, "renew: fenced")
	cases := []struct {
		name string
		err  error
		want map[string]any
	}{
		{"invalid_request", errorf(CodeInvalidRequest, "bad"), base(CodeInvalidRequest, "bad", nil)},
		{"unauthorized", errorf(CodeUnauthorized, "who"), base(CodeUnauthorized, "who", nil)},
		{"forbidden", errorf(CodeForbidden, "no"), base(CodeForbidden, "no", nil)},
		{"not_found", leasestore.ErrNotFound, base(CodeNotFound, leasestore.ErrNotFound.Error(), nil)},
		{"not_found for a path", echo.ErrNotFound, base(CodeNotFound, "no such route", nil)},
		{"method_not_allowed", echo.ErrMethodNotAllowed,
			base(CodeMethodNotAllowed, "this method is not served at this path; the Allow header lists those that are", nil)},
		{"lease_held", &leasestore.HeldError{Name: "shard:1", Owner: "w-17", Token: 4, ExpiresAt: expires},
			base(CodeLeaseHeld, `lease "shard:1" held by "w-17" (token 4) until 2026-01-01T00:00:03.0000005Z`,
				map[string]any{"holder_owner_id": "w-17", "expires_at": "2026-01-01T00:00:03.0000005Z"})},
		{"lease_lost", &leasestore.LostError{Name: "shard:1", Reason: leasestore.LostTokenMismatch},
			base(CodeLeaseLost, `lease "shard:1" lost: token_mismatch`, map[string]any{"reason": "token_mismatch"})},
		{"lease_lost by the local deadline", expiredError("shard:1"),
			base(CodeLeaseLost, `lease "shard:1" expired (local deadline passed)`, map[string]any{"reason": "expired"})},
		{"fenced", fenced, base(CodeFenced, "renew: fenced", nil)},
		{"not_holder", errorf(CodeNotHolder, "none"), base(CodeNotHolder, "none", nil)},
		{"misdirected", misdirected("shard:1", "gw-2", "http://gw-2:8080"),
			base(CodeMisdirected, `lease "shard:1" is held on replica "gw-2"; send the request there`,
				map[string]any{"holder": "gw-2", "holder_url": "http://gw-2:8080"})},
		{"generation_ended", errorf(CodeGenerationEnded, "ended"), base(CodeGenerationEnded, "ended", nil)},
		{"generation_ended after a commit was asked for", settle(fenced, fateUnknown),
			base(CodeGenerationEnded, "outcome unknown (renew: fenced); ask for a new generation with your current token and retry the same batch_id",
				map[string]any{"cause": "fenced"})},
		{"generation_ended by a fatal error", fatalEnded("commit", errors.New("boom"), 7),
			base(CodeGenerationEnded, "commit: fatal producer error, not a fence: boom; ask for a new generation with token 7 and retry the same batch_id",
				map[string]any{"cause": "fatal"})},
		{"batch_aborted", errorf(CodeBatchAborted, "aborted"), base(CodeBatchAborted, "aborted", nil)},
		{"payload_too_large", errorf(CodePayloadTooLarge, "big"), base(CodePayloadTooLarge, "big", nil)},
		{"too_many_requests", errorf(CodeTooManyRequests, "busy"), base(CodeTooManyRequests, "busy", nil)},
		{"kafka_unavailable", ErrKafkaUnavailable, base(CodeKafkaUnavailable, "kafka unavailable", nil)},
		{"store_unavailable", leasestore.ErrUnavailable, base(CodeStoreUnavailable, "lease store unavailable", nil)},
		{"draining", errDraining(), base(CodeDraining, errDraining().Detail, nil)},
		{"internal", errors.New("a bug"), base(CodeInternal, "internal error", nil)},
		{"direct_client_gated", &leasestore.GatedError{Pattern: "shard:*", State: leasestore.Gated},
			base(CodeDirectClientGated, `pattern "shard:*" is gated: clients that write Kafka directly may not take or renew its leases`,
				map[string]any{"pattern": "shard:*", "rollout_state": "gated"})},
		{"rollout_step_refused", rolloutError(&leasestore.StepError{Pattern: "shard:*", From: leasestore.Gated, To: leasestore.Enforced,
			Why: "1 lease(s) held", Blocking: []leasestore.Lease{{Name: "shard:5"}}}),
			base(CodeRolloutStepRefused, `rollout "shard:*": gated -> enforced refused: 1 lease(s) held`,
				map[string]any{"pattern": "shard:*", "rollout_state": "gated", "blocking_leases": []any{"shard:5"}})},
		{"ledger_behind", ledgerBehind("shard:1", 7, 6),
			base(CodeLedgerBehind, `the ledger has not applied the barrier of token 7 of "shard:1" yet (its fence is at 6); retry`,
				map[string]any{"ledger_token": float64(6)})},
		{"ledger_behind with no fence", ledgerBehind("shard:1", 7, 0),
			base(CodeLedgerBehind, `the ledger has not applied the barrier of token 7 of "shard:1" yet (its fence is at 0); retry`,
				map[string]any{"ledger_token": float64(0)})},
		{"forward_failed", forwardFailed("shard:1", "gw-2", errors.New("EOF")),
			base(CodeForwardFailed, `the request for lease "shard:1" was sent to replica "gw-2", which did not answer (EOF): the outcome is unknown; retry the same request`,
				map[string]any{"holder": "gw-2"})},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		status, got := renderProblem(t, tc.err)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: rendered %v, want %v", tc.name, got, tc.want)
		}
		if want := int(tc.want["status"].(float64)); status != want {
			t.Errorf("%s: status %d, want %d", tc.name, status, want)
		}
		covered[tc.want["code"].(string)] = true
	}
	for _, c := range declaredCodes(t) {
		if !covered[c] {
			t.Errorf("code %q has no case here", c)
		}
	}
}

// renderProblem is the status and the decoded problem document that the
// server's error handler writes for err.
func renderProblem(t *testing.T, err error) (int, map[string]any) {
	t.Helper()
	s := &Server{log: slog.New(slog.DiscardHandler), e: echo.New()}
	rec := httptest.NewRecorder()
	s.handleError(err, echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), rec))
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("content type %q", ct)
	}
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("problem %q: %v", rec.Body, err)
	}
	return rec.Code, doc
}

// declaredCodes are the values of the Code constants of errors.go.
func declaredCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Code" {
			for _, v := range vs.Values {
				s, _ := strconv.Unquote(v.(*ast.BasicLit).Value)
				codes = append(codes, s)
			}
		}
		return true
	})
	if len(codes) == 0 {
		t.Fatal("no Code constants in errors.go")
	}
	return slices.Sorted(slices.Values(codes))
}
