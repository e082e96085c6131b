package materializer

import (
	"encoding/json"
	"net/http"
)

// Handler serves /healthz, /readyz and /v1/status (verdict counts and lag
// per partition) for the materializer's own port.
func (m *Materializer) Handler() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// From the last check, younger than a second: a flood of probes
		// costs one Postgres query a second (FM43).
		if err := m.ready.Check(r.Context()); err != nil {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "https://fencegate.dev/problems/not_ready",
				"title": "Service Unavailable", "status": 503, "code": "not_ready", "detail": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		st := Status{Verdicts: m.Counts(), Lag: m.Lag()}
		if t := m.trustedSink(); t != nil {
			st.Trusted, st.TrustedLag = t.Counts(), t.Lag()
		}
		writeJSON(w, http.StatusOK, st)
	})
	return mux
}

// Status is the body of GET /v1/status; docs/observability.md defines
// each member ("The materializer's /v1/status").
type Status struct {
	// Verdicts counts the records of each verdict since the process
	// started; every verdict is present, 0 until one gets it.
	Verdicts map[Verdict]int64 `json:"verdicts"`
	// Lag is, per "topic/partition" this instance applies, the high
	// watermark last seen minus the next offset to apply (Lag).
	Lag map[string]int64 `json:"lag"`
	// Trusted counts the trusted sink's verdicts since the process
	// started, with --sinks kafka (absent otherwise).
	Trusted map[Verdict]int64 `json:"trusted,omitempty"`
	// TrustedLag is the trusted sink's Lag, per "topic/partition" it
	// owns, with --sinks kafka (absent otherwise).
	TrustedLag map[string]int64 `json:"trusted_lag,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
