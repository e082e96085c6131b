package materializer

import (
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"
)

// TestStatusMembersAreDocumented: every member GET /v1/status returns,
// and every verdict it counts, is defined in the section of
// docs/observability.md about it, and lag is keyed topic/partition as
// that section says.
func TestStatusMembersAreDocumented(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/observability.md")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("docs/observability.md is not next to this package")
	}
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "### The materializer's `/v1/status`")
	if !ok {
		t.Fatal("docs/observability.md has no section on the materializer's /v1/status")
	}
	section, _, _ = strings.Cut(section, "\n#")

	m := &Materializer{lag: map[partitionKey]int64{{"shard-output", 7}: 12}, log: slog.New(slog.DiscardHandler)}
	for _, v := range Verdicts {
		m.verdicts.Store(v, new(atomic.Int64))
	}
	var err2 error
	if m.met, err2 = newMetrics(noop.NewMeterProvider(), m); err2 != nil {
		t.Fatal(err2)
	}
	if _, err := m.Trusted(TrustedConfig{}); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/status", nil))
	var body map[string]map[string]int64
	if err := json.Unmarshal(rec.Body.Bytes(), &body); rec.Code != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/status: %d %s (%v)", rec.Code, rec.Body, err)
	}
	for member := range body {
		if !strings.Contains(section, "- `"+member+"`: ") {
			t.Errorf("member %q of /v1/status is not defined in docs/observability.md", member)
		}
	}
	for verdict := range body["verdicts"] {
		if !strings.Contains(section, "`"+verdict+"`") {
			t.Errorf("verdict %q of /v1/status is not in docs/observability.md", verdict)
		}
	}
	if len(body["verdicts"]) != len(Verdicts) {
		t.Errorf("verdicts %v, want every verdict of %v", body["verdicts"], Verdicts)
	}
	if lag := body["lag"]; len(lag) != 1 || lag["shard-output/7"] != 12 || !strings.Contains(section, "`topic/partition`") {
		t.Errorf("lag %v, want {\"shard-output/7\": 12} as documented (topic/partition)", lag)
	}
}
