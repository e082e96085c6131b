package loadtest

import (
	"fmt"
	"html/template"
	"io"
	"strings"
)

// chart is one SVG line chart over the timeline.
type chart struct {
	Title  string
	Series []series
	Marks  []mark // vertical markers (handovers, fences)
	MaxY   float64
	Width  int
	Height int
	LabelX []int
}

type series struct {
	Name, Color, Points string
}

type mark struct {
	X     float64
	Color string
	Title string
}

const chartW, chartH = 900, 220

func buildChart(title string, tl []second, vals map[string]func(second) float64, colors map[string]string, marks bool) chart {
	c := chart{Title: title, Width: chartW, Height: chartH}
	for _, s := range tl {
		for _, f := range vals {
			c.MaxY = max(c.MaxY, f(s))
		}
	}
	if c.MaxY == 0 {
		c.MaxY = 1
	}
	n := max(len(tl)-1, 1)
	x := func(i int) float64 { return 40 + float64(i)*float64(chartW-50)/float64(n) }
	for name, f := range vals {
		var pts []string
		for i, s := range tl {
			y := float64(chartH-20) - f(s)/c.MaxY*float64(chartH-40)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y))
		}
		c.LabelX = append(c.LabelX, 60+len(c.Series)*120)
		c.Series = append(c.Series, series{Name: name, Color: colors[name], Points: strings.Join(pts, " ")})
	}
	if marks {
		for i, s := range tl {
			if s.Handovers > 0 {
				c.Marks = append(c.Marks, mark{X: x(i), Color: "#8888ff", Title: fmt.Sprintf("%ds: %d handovers", i, s.Handovers)})
			}
			if s.Fences > 0 || s.Refused > 0 {
				c.Marks = append(c.Marks, mark{X: x(i), Color: "#ff4444", Title: fmt.Sprintf("%ds: %d fenced, %d stale refused", i, s.Fences, s.Refused)})
			}
		}
	}
	return c
}

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>fencegate loadtest</title>
<style>body{font-family:sans-serif;max-width:960px;margin:2em auto}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}svg{background:#fafafa;border:1px solid #ddd}
.pass{color:#070}.fail{color:#b00}</style></head><body>
<h1>fencegate loadtest: {{if .R.Pass}}<span class="pass">pass</span>{{else}}<span class="fail">FAIL</span>{{end}}</h1>
<pre>{{.Summary}}</pre>
{{range .Charts}}{{template "chart" .}}{{end}}
<p>Blue lines: handovers; red lines: fenced producers or refused stale writes.</p>
</body></html>
{{define "chart"}}<h2>{{.Title}}</h2>
<svg width="{{.Width}}" height="{{.Height}}" xmlns="http://www.w3.org/2000/svg">
<text x="4" y="14" font-size="11">max {{printf "%.1f" .MaxY}}</text>
{{range .Marks}}<line x1="{{.X}}" x2="{{.X}}" y1="20" y2="{{$.Height}}" stroke="{{.Color}}" stroke-width="1"><title>{{.Title}}</title></line>{{end}}
{{range $i, $s := .Series}}<polyline fill="none" stroke="{{$s.Color}}" stroke-width="2" points="{{$s.Points}}"/>
<text x="{{index $.LabelX $i}}" y="{{$.Height}}" font-size="11" fill="{{$s.Color}}" dy="-4">{{$s.Name}}</text>{{end}}
</svg>{{end}}`))

// WriteHTML writes a self-contained page: summary table, throughput and
// p50/p99 latency over time with handovers and fences marked.
func (rep *Report) WriteHTML(w io.Writer) error {
	tl := rep.Timeline
	charts := []chart{
		buildChart("Throughput (records/s)", tl, map[string]func(second) float64{
			"records/s": func(s second) float64 { return float64(s.Records) }}, map[string]string{"records/s": "#2a7"}, true),
		buildChart("Batch latency (ms)", tl, map[string]func(second) float64{
			"p50": func(s second) float64 { return s.P50Ms }, "p99": func(s second) float64 { return s.P99Ms }},
			map[string]string{"p50": "#27a", "p99": "#a27"}, true),
	}
	return page.Execute(w, map[string]any{"R": rep, "Summary": rep.Markdown(), "Charts": charts})
}
