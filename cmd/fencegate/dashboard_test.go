package main

import (
	"encoding/json"
	"os"
	"testing"
)

// TestDashboardShape: the Grafana dashboard's tables are one row per lease
// (instant queries in table format, merged when there are several, not a
// frame per series), every query uses the data source variable, and no two
// panels overlap. Whether each query returns data is checked against a
// real Prometheus by TestPrometheusSeesTheFirstIncident.
func TestDashboardShape(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Type    string                   `json:"type"`
			Title   string                   `json:"title"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				Expr       string `json:"expr"`
				Format     string `json:"format"`
				Instant    bool   `json:"instant"`
				Datasource struct {
					UID string `json:"uid"`
				} `json:"datasource"`
			} `json:"targets"`
			Transformations []struct {
				ID string `json:"id"`
			} `json:"transformations"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	tables := 0
	for i, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Datasource.UID != "${datasource}" {
				t.Errorf("%q: query without the data source variable: %s", p.Title, tg.Expr)
			}
			if p.Type == "table" && (tg.Format != "table" || !tg.Instant) {
				t.Errorf("table %q: query %s is not an instant query in table format (a frame per series)", p.Title, tg.Expr)
			}
		}
		if p.Type == "table" {
			tables++
			merged := len(p.Targets) < 2
			for _, tr := range p.Transformations {
				merged = merged || tr.ID == "merge"
			}
			if !merged {
				t.Errorf("table %q has %d queries and no merge: one table per query instead of one row per lease", p.Title, len(p.Targets))
			}
		}
		for _, q := range d.Panels[:i] {
			a, b := p.GridPos, q.GridPos
			if a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H {
				t.Errorf("panels %q and %q overlap", p.Title, q.Title)
			}
		}
	}
	if tables < 2 {
		t.Errorf("%d tables, want the per-lease generation table and the versions table", tables)
	}
}
