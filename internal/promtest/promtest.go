// Package promtest runs Debian's Prometheus for a test: it scrapes the
// given targets every second, evaluates the project's alert rules every
// second, and answers queries through its HTTP API. deploy/dev/prom.sh
// installs the binary; make test runs it before the suite.
//
// It must never be imported by code that ships: it starts processes and
// binds ports for a test.
package promtest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Server is a Prometheus started for one test and stopped with it.
type Server struct {
	URL string
	t   testing.TB
}

// Sample is one series of a query answer.
type Sample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
	Values [][]any           `json:"values"`
}

// Alert is one alert of /api/v1/alerts.
type Alert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

// Start runs prometheus with rules (a path; empty: none) and one scrape
// job per entry of jobs (job name -> host:port targets), scrape and rule
// evaluation every second.
func Start(t testing.TB, rules string, jobs map[string][]string) *Server {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not found: run `make test` or `deploy/dev/prom.sh install` (%v)", err)
	}
	dir := t.TempDir()
	var conf strings.Builder
	conf.WriteString("global: {scrape_interval: 1s, evaluation_interval: 1s}\n")
	if rules != "" {
		abs, err := filepath.Abs(rules)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&conf, "rule_files: [%q]\n", abs)
	}
	conf.WriteString("scrape_configs:\n")
	names := make([]string, 0, len(jobs))
	for name := range jobs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		quoted := make([]string, len(jobs[name]))
		for i, tg := range jobs[name] {
			quoted[i] = strconv.Quote(tg)
		}
		fmt.Fprintf(&conf, "  - job_name: %s\n    static_configs: [{targets: [%s]}]\n", name, strings.Join(quoted, ", "))
	}
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logPath := filepath.Join(dir, "prometheus.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+confPath, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s := &Server{URL: "http://" + addr, t: t}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logf.Close()
		if t.Failed() {
			raw, _ := os.ReadFile(logPath)
			t.Logf("prometheus configuration:\n%s\nprometheus log:\n%s", conf.String(), raw)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-exited:
			raw, _ := os.ReadFile(logPath)
			t.Fatalf("prometheus exited:\n%s", raw)
		case <-time.After(100 * time.Millisecond): // polling readiness, bounded by the deadline
		}
		if time.Now().After(deadline) {
			t.Fatal("prometheus not ready after 30s")
		}
	}
}

// API GETs path with params and decodes the data member of the answer.
func (s *Server) API(path string, params url.Values, out any) {
	s.t.Helper()
	resp, err := http.Get(s.URL + path + "?" + params.Encode())
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil || env.Status != "success" {
		s.t.Fatalf("prometheus %s %v: %s %v", path, params, raw, err)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		s.t.Fatalf("prometheus %s: %v", path, err)
	}
}

// Query runs an instant query.
func (s *Server) Query(expr string) []Sample {
	s.t.Helper()
	var data struct {
		Result []Sample `json:"result"`
	}
	s.API("/api/v1/query", url.Values{"query": {expr}}, &data)
	return data.Result
}

// RangeHasData runs expr as Grafana would over [from, to] at a 1 s step
// and returns how many series have at least one number (NaN, a quantile
// over no events, is not data).
func (s *Server) RangeHasData(expr string, from, to time.Time) int {
	s.t.Helper()
	var data struct {
		Result []Sample `json:"result"`
	}
	s.API("/api/v1/query_range", url.Values{"query": {expr}, "start": {unix(from)}, "end": {unix(to)}, "step": {"1"}}, &data)
	n := 0
	for _, r := range data.Result {
		for _, v := range r.Values {
			if f, err := strconv.ParseFloat(fmt.Sprint(v[1]), 64); err == nil && !math.IsNaN(f) {
				n++
				break
			}
		}
	}
	return n
}

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }

// WaitFor polls expr until it returns a sample.
func (s *Server) WaitFor(timeout time.Duration, expr string) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for len(s.Query(expr)) == 0 {
		if time.Now().After(deadline) {
			s.t.Fatalf("after %v Prometheus still has no %s", timeout, expr)
		}
		time.Sleep(200 * time.Millisecond) // polling Prometheus, bounded by the deadline
	}
}

// Alerts lists the pending and firing alerts.
func (s *Server) Alerts() []Alert {
	s.t.Helper()
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	s.API("/api/v1/alerts", url.Values{}, &data)
	return data.Alerts
}

// WaitAlert polls until alert name fires with (at least) labels.
func (s *Server) WaitAlert(timeout time.Duration, name string, labels map[string]string) Alert {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, a := range s.Alerts() {
			if a.Labels["alertname"] != name || a.State != "firing" {
				continue
			}
			match := true
			for k, v := range labels {
				match = match && a.Labels[k] == v
			}
			if match {
				return a
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s%v not firing after %v; alerts: %+v", name, labels, timeout, s.Alerts())
		}
		time.Sleep(200 * time.Millisecond) // polling Prometheus, bounded by the deadline
	}
}

// TargetsDown returns "job instance: error" for every target not up.
func (s *Server) TargetsDown() []string {
	s.t.Helper()
	var data struct {
		Active []struct {
			Labels    map[string]string `json:"labels"`
			Health    string            `json:"health"`
			LastError string            `json:"lastError"`
		} `json:"activeTargets"`
	}
	s.API("/api/v1/targets", url.Values{}, &data)
	var out []string
	for _, tg := range data.Active {
		if tg.Health != "up" {
			out = append(out, fmt.Sprintf("%s %s: %s %s", tg.Labels["job"], tg.Labels["instance"], tg.Health, tg.LastError))
		}
	}
	return out
}
