package brokercheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Verify runs the fence checks and then the settings checks (after the
// fence checks, __transaction_state exists even on a new cluster) and
// returns every result. An error of the connection itself (a refused
// login, a cluster that does not answer) is an ERROR result: the report
// says so and exits 2.
func Verify(ctx context.Context, cfg Config) Report {
	start := time.Now()
	rep := Report{Brokers: cfg.Conn.Brokers}
	rep.Results = Fence(ctx, cfg)
	settings, err := Settings(ctx, cfg)
	if err != nil {
		settings = []Result{{Check: "settings", Subject: "cluster", Status: Error, Evidence: err.Error(),
			Fix: "check the connection settings (docs/security.md)"}}
	}
	rep.Results = append(rep.Results, settings...)
	rep.Results = append(rep.Results, grantsResult(ctx, cfg))
	rep.Took = time.Since(start).Round(10 * time.Millisecond).String()
	return rep
}

// Refused returns the results serve refuses to start on: the FAILs with
// an Unsafe name that allowed does not name; overridden are those it
// names.
func Refused(results []Result, allowed []string) (refused, overridden []Result) {
	for _, r := range results {
		if r.Status != Fail || r.Unsafe == "" {
			continue
		}
		if slices.Contains(allowed, r.Unsafe) {
			overridden = append(overridden, r)
		} else {
			refused = append(refused, r)
		}
	}
	return refused, overridden
}

// ParseAllowed parses --allow-unsafe-broker: a comma-separated list of
// UnsafeNames. An unknown name is an error (a typo must not be an
// override that overrides nothing, nor pass silently).
func ParseAllowed(s string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !slices.Contains(UnsafeNames(), n) {
			return nil, fmt.Errorf("unknown unsafe broker setting %q: the names are %s", n, strings.Join(UnsafeNames(), ", "))
		}
		out = append(out, n)
	}
	return out, nil
}

// RefusalError is serve's refusal: each setting that breaks the fence,
// what it does and its fix.
type RefusalError struct{ Refused []Result }

// Error lists each refused setting with its evidence, its fix and the
// override that names it.
func (e *RefusalError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the broker has %d setting(s) that break the fence; refusing to start:", len(e.Refused))
	for _, r := range e.Refused {
		fmt.Fprintf(&b, "\n  %s on %s: %s\n    fix: %s\n    to start anyway: --allow-unsafe-broker=%s", r.Check, r.Subject, r.Evidence, r.Fix, r.Unsafe)
	}
	return b.String()
}
