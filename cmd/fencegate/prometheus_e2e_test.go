package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/internal/promtest"
)

// The repository's operator artefacts, read by the test as shipped.
const (
	alertsFile    = "../../deploy/prometheus/alerts.yaml"
	dashboardFile = "../../deploy/grafana/fencegate.json"
)

// TestPrometheusSeesTheFirstIncident runs the gateway and the materializer
// as the binary does, scraped every second by a real Prometheus (Debian's,
// installed by deploy/dev/prom.sh) loaded with the shipped alert rules.
// During a short run with a steady worker it makes one stale write through
// the gateway, injects one header-less record straight into the lease
// topic, then one stale record, and checks what an operator would: the
// ticket fires for the refused stale write, the page for the first refused
// record, both pages for the stale record in Kafka, every dashboard query
// returns data, and every metric the dashboard and the rules name is
// exported.
func TestPrometheusSeesTheFirstIncident(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	k := kafkatest.Start(t, "shard-output", 4)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "fencegate.yaml")
	yaml := fmt.Sprintf("transactional_id_prefix: e2e\nroutes:\n  - {pattern: \"shard:*\", topic: shard-output, partitions: 4}\n"+
		"clients:\n  - {name: worker, token_sha256: %s, allow: [\"*\"]}\n", gateway.HashToken("worker-token"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stopped sync.WaitGroup
	t.Cleanup(func() { cancel(); stopped.Wait() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	common := commonFlags{databaseURL: db.URL, brokers: k.Brokers, configPath: cfg,
		barrierKey: "e2e-barrier-key-0123456789", migrate: true,
		// The dashboard's per-lease table reads the opt-in series.
		leaseMetrics: true}

	ready := make(chan string, 1)
	gwErr := make(chan error, 1)
	stopped.Add(1)
	go func() {
		defer stopped.Done()
		gwErr <- serve(ctx, serveFlags{listen: "127.0.0.1:0", replica: "e2e-gw", minTTL: time.Millisecond,
			maxTTL: time.Hour, txnTimeout: 10 * time.Second, commonFlags: common}, quiet, ready)
	}()
	var gw string
	select {
	case addr := <-ready:
		gw = "http://" + addr
	case err := <-gwErr:
		t.Fatalf("serve: %v", err)
	}
	matAddr := freeAddr(t)
	mf := materializeFlags{listen: matAddr, commonFlags: common}
	mf.migrate = true // the ledger's own migration line (serve migrates the lease store's)
	stopped.Add(1)
	go func() {
		defer stopped.Done()
		if err := materialize(ctx, mf, quiet); err != nil && ctx.Err() == nil {
			t.Errorf("materialize: %v", err)
		}
	}()

	prom := promtest.Start(t, alertsFile, map[string][]string{
		"fencegate-gateway": {strings.TrimPrefix(gw, "http://")}, "fencegate-materializer": {matAddr}})
	began := time.Now()

	// Both targets are up and Prometheus holds the refusal counters at 0:
	// only then is the first refusal an increase Prometheus can see.
	prom.WaitFor(60*time.Second, `count(up{job=~"fencegate-.*"} == 1) == 2`)
	prom.WaitFor(30*time.Second, `fencegate_materializer_records_total{verdict="malformed"} == 0`)
	prom.WaitFor(30*time.Second, `fencegate_batches_total{outcome="stale_token"} == 0`)
	atStart := prom.Query(`{__name__=~"fencegate_.*_total"}`)
	var names []string
	for _, s := range atStart {
		names = append(names, seriesName(s.Metric))
	}
	slices.Sort(names)
	t.Logf("counter series present before any request (%d): %s", len(names), strings.Join(names, ", "))

	// A steady worker: batches and renewals every 100 ms, for the
	// latency and throughput panels.
	w := &worker{base: gw}
	token := w.acquire(t, "shard:1", "steady", 60000)
	stopped.Add(1)
	go func() {
		defer stopped.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w.do("POST", "/v1/leases/shard:1/records", produceBody("steady", token, fmt.Sprintf("b%d", i), 5))
			w.do("PATCH", "/v1/leases/shard:1", map[string]any{"owner_id": "steady", "token": token, "ttl_ms": 60000})
		}
	}()

	// Churn: a lease released and acquired again every 500 ms, so that
	// handovers happen throughout the run (their latency panel and the
	// handover annotations need events on both sides of a scrape).
	stopped.Add(1)
	go func() {
		defer stopped.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		var token int64
		for {
			if st, body := w.do("POST", "/v1/leases", map[string]any{"name": "shard:3", "owner_id": "churn", "ttl_ms": 60000}); st == http.StatusCreated {
				var rep struct {
					Token int64 `json:"token"`
				}
				_ = json.Unmarshal(body, &rep)
				token = rep.Token
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w.do("DELETE", "/v1/leases/shard:3", map[string]any{"owner_id": "churn", "token": token})
		}
	}()

	// The stale write: a former owner whose lease expired and was taken
	// over writes with its old token.
	// TTL 2 s: a handover may take half the TTL, and under -race on two
	// shared cores InitTransactions alone can take longer than 150 ms.
	old := w.acquire(t, "shard:2", "former", 2000)
	st, body := w.do("POST", "/v1/leases/shard:2/records", produceBody("former", old, "f1", 3))
	var first struct {
		Partition int32 `json:"partition"`
	}
	if st != http.StatusOK || json.Unmarshal(body, &first) != nil {
		t.Fatalf("former owner's first batch: %d %s", st, body)
	}
	tick := time.NewTicker(50 * time.Millisecond) // polling for the lease to expire
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for {
		st, body := w.do("POST", "/v1/leases", map[string]any{"name": "shard:2", "owner_id": "successor", "ttl_ms": 60000})
		if st == http.StatusCreated {
			break
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("takeover of shard:2: %d %s", st, body)
		}
	}
	staleAt := time.Now()
	st, body = w.do("POST", "/v1/leases/shard:2/records", produceBody("former", old, "f2", 3))
	if st != http.StatusConflict {
		t.Fatalf("stale write: %d %s, want 409", st, body)
	}
	t.Logf("stale write answered %d %s", st, body)

	// The refused record: no fencegate headers, written around the gateway.
	injectAt := time.Now()
	inject(t, k.Brokers, "shard-output", 3, nil)

	page := prom.WaitAlert(60*time.Second, "FencegateLedgerRefusedRecord", map[string]string{"verdict": "malformed"})
	pageAfter := time.Since(injectAt)
	ticket := prom.WaitAlert(60*time.Second, "FencegateStaleWriteRefused", nil)
	ticketAfter := time.Since(staleAt)
	t.Logf("FencegateLedgerRefusedRecord (page) firing %.1fs after the injected record (active since %s): %v",
		pageAfter.Seconds(), page.ActiveAt, page.Labels)
	t.Logf("FencegateStaleWriteRefused (ticket) firing %.1fs after the stale write (at most: polled after the page): %v", ticketAfter.Seconds(), ticket.Labels)

	// A stale record that reaches Kafka: the former owner's token on the
	// lease's partition, after the successor's barrier, written around
	// the gateway (as a producer holding the transactional id outside it
	// would). The ledger refuses it as stale and both pages fire.
	staleKafkaAt := time.Now()
	inject(t, k.Brokers, "shard-output", first.Partition, map[string]string{barrier.HeaderLease: "shard:2",
		barrier.HeaderToken: strconv.FormatInt(old, 10), barrier.HeaderOwner: "former",
		barrier.HeaderBatch: "f3", barrier.HeaderSeq: "0"})
	inKafka := prom.WaitAlert(60*time.Second, "FencegateStaleWriteInKafka", map[string]string{"verdict": "stale"})
	prom.WaitAlert(60*time.Second, "FencegateLedgerRefusedRecord", map[string]string{"verdict": "stale"})
	t.Logf("FencegateStaleWriteInKafka (page) firing %.1fs after the stale record reached Kafka: %v",
		time.Since(staleKafkaAt).Seconds(), inKafka.Labels)
	for _, a := range prom.Alerts() {
		t.Logf("alert %s %s %v", a.Labels["alertname"], a.State, a.Labels)
		switch a.Labels["alertname"] {
		case "FencegateStaleWriteRefused", "FencegateLedgerRefusedRecord", "FencegateStaleWriteInKafka":
			continue
		}
		if a.Labels["alertname"] == "FencegateProducerFenced" {
			t.Errorf("%s fired, but no producer was fenced: %v", a.Labels["alertname"], a.Labels)
		}
	}

	for _, down := range prom.TargetsDown() {
		t.Errorf("target down: %s", down)
	}

	// Every dashboard query returns data over the run, and every metric it
	// or a rule names is one the two processes export.
	dash := loadDashboard(t)
	exported := exportedNames(t, gw+"/metrics", "http://"+matAddr+"/metrics")
	for _, q := range dash.queries() {
		// Grafana sizes both from the panel's range; 15 s holds several
		// 1 s scrapes even when a loaded machine delays some of them.
		expr := strings.ReplaceAll(q.expr, "$__rate_interval", "15s")
		expr = strings.ReplaceAll(expr, "$__interval", "15s")
		if q.annotation && q.panel != "annotation Handovers" {
			// An annotation filters events ("> 0"); fences did not happen
			// in this run, so the series under the filter must have data.
			expr = strings.TrimSuffix(expr, " > 0")
		}
		// A histogram's series is born at its first event and a rate needs
		// two scrapes of it: wait for the data, with a deadline.
		n := pollRange(prom, expr, began, 30*time.Second)
		if n == 0 {
			t.Errorf("dashboard %q: query returned no data in %v: %s", q.panel, time.Since(began).Round(time.Second), expr)
		} else {
			t.Logf("dashboard %q: %d series with data: %s", q.panel, n, q.expr)
		}
		for _, m := range metricNames(q.expr) {
			if !exported[m] {
				t.Errorf("dashboard %q names %s, which neither process exports", q.panel, m)
			}
		}
	}
	for _, expr := range ruleExprs(t) {
		for _, m := range metricNames(expr) {
			if !exported[m] && m != "up" { // up is Prometheus's own
				t.Errorf("alerts.yaml names %s, which neither process exports", m)
			}
		}
	}
	for _, job := range []string{"fencegate-gateway", "fencegate-materializer"} {
		for _, q := range []string{`target_info{job="%s", service_name="%s", service_instance_id!=""}`,
			`fencegate_build_info{job="%s", librdkafka_version!="", version!=""}`, `go_goroutines{job="%s"}`,
			`process_resident_memory_bytes{job="%s"}`} {
			expr := fmt.Sprintf(q, job, job)
			if strings.Count(q, "%s") == 1 {
				expr = fmt.Sprintf(q, job)
			}
			if len(prom.Query(expr)) == 0 {
				t.Errorf("Prometheus has no %s", expr)
			}
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if _, seen := handedOut.LoadOrStore(addr, true); !seen {
			return addr
		}
	}
}

// handedOut holds every address freeAddr returned in this process: the
// kernel may give a closed port to the next Listen, and two of one
// command's listeners on one address would make it stop.
var handedOut sync.Map

func seriesName(m map[string]string) string {
	var ls []string
	for k, v := range m {
		if k != "__name__" && k != "job" && k != "instance" && !strings.HasPrefix(k, "otel_") {
			ls = append(ls, k+"="+v)
		}
	}
	slices.Sort(ls)
	return fmt.Sprintf("%s/%s{%s}", m["job"], m["__name__"], strings.Join(ls, ","))
}

// worker speaks the gateway's HTTP API with the test client's token.
type worker struct{ base string }

func (w *worker) do(method, path string, body any) (int, []byte) {
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, w.base+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer worker-token")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// acquire takes a lease, retrying 503 answers (a handover that ran out of
// its budget on a loaded machine) as a worker would, within a deadline.
func (w *worker) acquire(t *testing.T, name, owner string, ttlMS int) int64 {
	t.Helper()
	backoff := time.NewTicker(100 * time.Millisecond) // a worker's retry back-off
	defer backoff.Stop()
	deadline := time.After(30 * time.Second)
	for {
		st, body := w.do("POST", "/v1/leases", map[string]any{"name": name, "owner_id": owner, "ttl_ms": ttlMS})
		var rep struct {
			Token int64 `json:"token"`
		}
		if st == http.StatusCreated && json.Unmarshal(body, &rep) == nil {
			return rep.Token
		}
		if st != http.StatusServiceUnavailable {
			t.Fatalf("acquire %s: %d %s", name, st, body)
		}
		select {
		case <-backoff.C:
		case <-deadline:
			t.Fatalf("acquire %s: %d %s", name, st, body)
		}
	}
}

func produceBody(owner string, token int64, batch string, n int) map[string]any {
	recs := make([]map[string]any, n)
	for i := range recs {
		recs[i] = map[string]any{"value": map[string]any{"type": "STRING", "data": fmt.Sprintf("%s/%d", batch, i)}}
	}
	return map[string]any{"owner_id": owner, "token": token, "batch_id": batch, "records": recs}
}

// inject writes one record with headers (none: a header-less record)
// straight to the topic, as a producer that bypassed the gateway would.
func inject(t *testing.T, brokers, topic string, partition int32, headers map[string]string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := &kgo.Record{Topic: topic, Partition: partition, Value: []byte("written around the gateway")}
	for k, v := range headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// dashboard is the part of the Grafana JSON the test reads.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Annotations struct {
		List []struct {
			Name string `json:"name"`
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
}

type dashQuery struct {
	panel, expr string
	annotation  bool
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// queries lists every panel target and annotation query.
func (d dashboard) queries() []dashQuery {
	var out []dashQuery
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Expr != "" {
				out = append(out, dashQuery{panel: p.Title, expr: tg.Expr})
			}
		}
	}
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			out = append(out, dashQuery{panel: "annotation " + a.Name, expr: a.Expr, annotation: true})
		}
	}
	return out
}

// ruleExprs returns the expressions of the shipped alert rules.
func ruleExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}

// selector matches a metric name where PromQL selects one: before a label
// matcher or a range. The dashboard and the rules always select with one
// of the two, so no metric escapes the check.
var selector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{\[]`)

func metricNames(expr string) []string {
	var out []string
	for _, m := range selector.FindAllStringSubmatch(expr, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// exportedNames scrapes the endpoints and returns every sample name they
// export (histograms as _bucket, _sum and _count).
func exportedNames(t *testing.T, endpoints ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, u := range endpoints {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		for name, f := range fams {
			out[name] = true
			if f.GetType().String() == "HISTOGRAM" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					out[name+s] = true
				}
			}
		}
	}
	return out
}

// pollRange asks Prometheus every half second, until timeout, how many
// series of expr have data since began.
func pollRange(prom *promtest.Server, expr string, began time.Time, timeout time.Duration) int {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		if n := prom.RangeHasData(expr, began, time.Now()); n > 0 {
			return n
		}
		select {
		case <-tick.C:
		case <-deadline:
			return 0
		}
	}
}
