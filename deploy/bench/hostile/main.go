// Command hostile re-runs the scenarios of the security review of issue 21
// (FM39-FM47) against a running `fencegate dev` and prints what it
// measured, one line per figure. deploy/bench/hostile.sh starts the dev
// process on a database of its own and runs each scenario; run it from
// there.
//
// usage: go run ./deploy/bench/hostile -url URL -pid PID [flags] SCENARIO
//
// Scenarios: headers, methods, leases, listing, readyz (see each
// function's comment). Timings are of one run on whatever machine it runs
// on: compare the ratios measured side by side in one run.
//
// It must never be pointed at a gateway that serves real work: it floods
// the one it is given.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/client/wire"
	"github.com/jackc/pgx/v5"
)

var (
	base   = flag.String("url", "http://127.0.0.1:18600", "the gateway's base URL")
	pid    = flag.Int("pid", 0, "the gateway process, for CPU time, threads and RSS from /proc")
	token  = flag.String("token", "dev-token", "bearer token of the client under test (tenant a)")
	tokenB = flag.String("token-b", "", "bearer token of the other client (tenant b; empty: -token)")
	pgURL  = flag.String("pg", "", "the dev database, for its transaction count (readyz)")
	window = flag.Duration("window", 3*time.Second, "how long each side of a comparison runs")
	n      = flag.Int("n", 1200, "leases to acquire (leases, listing)")
)

var hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: time.Minute}

func main() {
	flag.Parse()
	if *tokenB == "" {
		*tokenB = *token
	}
	scenarios := map[string]func() error{
		"headers": headers, "methods": methods, "leases": leases, "listing": listing, "readyz": readyz,
	}
	run, ok := scenarios[flag.Arg(0)]
	if !ok {
		fmt.Fprintln(os.Stderr, "usage: hostile [flags] headers|methods|leases|listing|readyz")
		os.Exit(2)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(1)
	}
}

// headers: binary bodies of one record with 100 and 60,000 headers for a
// lease with no session, their status and the gateway's CPU time (the
// mean of 20); eight 60,000-header bodies at once; then another client's
// renewal latency alone and while eight senders loop on that body.
func headers() error {
	for _, count := range []int{100, 60000} {
		body := manyHeaders(count)
		const times = 20
		code, cpu := 0, cpuTime()
		for range times {
			var err error
			if code, err = post("/v1/leases/shard:39/records", wire.ContentType, body, *token); err != nil {
				return err
			}
		}
		fmt.Printf("headers=%d body_bytes=%d status=%d gateway_cpu_each=%v\n", count, len(body), code, (cpuTime()-cpu)/times)
	}
	flood := manyHeaders(60000)
	cpu, t0 := cpuTime(), time.Now()
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Go(func() { codes[i], _ = post("/v1/leases/shard:39/records", wire.ContentType, flood, *token) })
	}
	wg.Wait()
	fmt.Printf("eight_at_once statuses=%v wall=%v gateway_cpu=%v\n", codes, time.Since(t0).Round(time.Millisecond), cpuTime()-cpu)
	r, err := newRenewer("b:renewer-7")
	if err != nil {
		return err
	}
	return compare(r, "eight senders looping on 60,000 headers", 8, func() error {
		_, err := post("/v1/leases/shard:39/records", wire.ContentType, flood, *token)
		return err
	})
}

// manyHeaders is a binary produce body of one record with count headers
// of distinct three-character names and empty values (60,000: about
// 300 KB, the review's 296 KB body).
func manyHeaders(count int) []byte {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	rec := wire.Record{Value: []byte("v")}
	for i := range count {
		name := []byte{digits[i/62/62%62], digits[i/62%62], digits[i%62]}
		rec.Headers = append(rec.Headers, wire.Header{Name: string(name), Value: []byte{}})
	}
	return wire.Append(nil, wire.Batch{OwnerID: "w", Token: 1, BatchID: "b", Records: []wire.Record{rec}})
}

// methods: 2,000 requests with invented methods, then a real 404, and
// what /metrics holds of them; then 100 methods of 60 KB and the size and
// time of a scrape.
func methods() error {
	for i := range 2000 {
		if _, err := do(fmt.Sprintf("XM%04d", i), "/v1/leases", "", nil, *token); err != nil {
			return err
		}
	}
	if _, err := do("GET", "/v1/no-such-route", "", nil, *token); err != nil {
		return err
	}
	m, _, err := scrape()
	if err != nil {
		return err
	}
	series, overflow, notFound := 0, false, false
	var labels []string
	for line := range strings.Lines(m) {
		if !strings.HasPrefix(line, "http_server_request_duration_seconds_count{") {
			continue
		}
		series++
		if _, rest, ok := strings.Cut(line, `http_request_method="`); ok {
			method, _, _ := strings.Cut(rest, `"`)
			if !slices.Contains(labels, method) {
				labels = append(labels, method)
			}
		}
		overflow = overflow || strings.Contains(line, `otel_metric_overflow="true"`)
		notFound = notFound || strings.Contains(line, `http_response_status_code="404"`) && strings.Contains(line, `http_request_method="GET"`)
	}
	fmt.Printf("invented_methods=2000 duration_series=%d methods=%v overflow=%v real_404_labelled=%v\n", series, labels, overflow, notFound)
	long := strings.Repeat("M", 60*1024)
	for i := range 100 {
		if _, err := do(fmt.Sprintf("%s%03d", long, i), "/v1/leases", "", nil, *token); err != nil {
			return err
		}
	}
	var times []time.Duration
	for range 5 {
		var took time.Duration
		m, took, err = scrape()
		if err != nil {
			return err
		}
		times = append(times, took)
	}
	slices.Sort(times)
	fmt.Printf("long_methods=100x60KB metrics_bytes=%d scrape_median=%v scrape_max=%v\n", len(m), times[2], times[4])
	return nil
}

// leases: one client acquires -n leases, 16 at a time; the answers by
// status, the time taken, the process's threads and RSS before and after,
// and the lease names /metrics shows.
func leases() error {
	th0, rss0 := procStatus("Threads"), procStatus("VmRSS")
	start := time.Now()
	codes := acquireMany("shard:", 100000, *n, *token)
	took := time.Since(start)
	fmt.Printf("acquires=%d answers=%v took=%v threads %s -> %s rss %s -> %s\n", *n, codes, took.Round(time.Millisecond),
		th0, procStatus("Threads"), rss0, procStatus("VmRSS"))
	return leaseSeries()
}

// leaseSeries prints how many series of /metrics name a lease.
func leaseSeries() error {
	m, _, err := scrape()
	if err != nil {
		return err
	}
	named, tokens := 0, 0
	for line := range strings.Lines(m) {
		if strings.Contains(line, "_series_omitted") && !strings.HasPrefix(line, "#") {
			fmt.Print(line)
		}
		if strings.Contains(line, `fencegate_lease="`) {
			named++
			if strings.HasPrefix(line, "fencegate_lease_token{") {
				tokens++
			}
		}
	}
	fmt.Printf("metrics_series_naming_a_lease=%d lease_token_series=%d\n", named, tokens)
	return nil
}

// acquireMany acquires count leases prefix+from.., 16 at a time, and
// returns the answers by status.
func acquireMany(prefix string, from, count int, tok string) map[int]int {
	var mu sync.Mutex
	codes := map[int]int{}
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= count {
					return
				}
				b, _ := json.Marshal(map[string]any{"name": fmt.Sprintf("%s%d", prefix, from+i), "owner_id": "flood", "ttl_ms": 600000})
				code, err := post("/v1/leases", "application/json", b, tok)
				if err != nil {
					code = -1
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return codes
}

// listing: tenant a (-token, allowed a:*) acquires -n leases, tenant b
// (-token-b, allowed b:*) three; b's listing, a's listing page by page,
// and the answer to ?prefix=%00 and %ff.
func listing() error {
	fmt.Printf("tenant_a_acquires=%d answers=%v\n", *n, acquireMany("a:", 0, *n, *token))
	fmt.Printf("tenant_b_acquires=3 answers=%v\n", acquireMany("b:", 0, 3, *tokenB))
	names, pages, err := listAll(*tokenB)
	if err != nil {
		return err
	}
	fmt.Printf("tenant_b_lists=%d %v (pages %d)\n", len(names), names[:min(len(names), 10)], pages)
	names, pages, err = listAll(*token)
	if err != nil {
		return err
	}
	fmt.Printf("tenant_a_lists=%d distinct=%d (pages %d)\n", len(names), len(slices.Compact(slices.Clone(names))), pages)
	for _, p := range []string{"%00", "%ff"} {
		code, err := do("GET", "/v1/leases?prefix="+p, "", nil, *tokenB)
		if err != nil {
			return err
		}
		fmt.Printf("prefix=%s status=%d\n", p, code)
	}
	return nil
}

// listAll lists every lease tok may see, following the cursor.
func listAll(tok string) ([]string, int, error) {
	var names []string
	after, pages := "", 0
	for {
		q := "/v1/leases"
		if after != "" {
			q += "?after=" + after
		}
		req, _ := http.NewRequest("GET", *base+q, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, pages, err
		}
		var page struct {
			Leases []struct{ Name string } `json:"leases"`
			Next   string                  `json:"next"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return nil, pages, fmt.Errorf("listing: %d: %w", resp.StatusCode, err)
		}
		pages++
		for _, l := range page.Leases {
			names = append(names, l.Name)
		}
		if page.Next == "" {
			return names, pages, nil
		}
		after = page.Next
	}
}

// readyz: another client's renewals and the dev database's transactions
// per second (pg_stat_database; the readiness check's query is one),
// alone and under 64 connections of /readyz, then of /healthz (an HTTP
// call that touches nothing).
func readyz() error {
	r, err := newRenewer("b:renewer-8")
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(context.Background(), *pgURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	xacts := func() int64 {
		var v int64
		// Not from a snapshot: each read clears it. A busy backend flushes
		// its counters about once a second, an idle one within ten (Postgres
		// 15 and later), so each window is counted with the 11 s after it.
		_ = conn.QueryRow(context.Background(), "SELECT pg_stat_clear_snapshot(), xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(nil, &v)
		return v
	}
	rate := func(run func() error) (float64, error) {
		x0, t0 := xacts(), time.Now()
		err := run()
		time.Sleep(11 * time.Second)
		return float64(xacts()-x0) / time.Since(t0).Seconds(), err
	}
	for _, path := range []string{"/readyz", "/healthz"} {
		var alone, during latencies
		quiet, err := rate(func() (err error) { alone, err = r.run(*window); return err })
		if err != nil {
			return err
		}
		var calls int64
		loud, err := rate(func() (err error) {
			calls, err = flood(64, func() error {
				_, err := do("GET", path, "", nil, "")
				return err
			}, func() (err error) { during, err = r.run(*window); return err })
			return err
		})
		if err != nil {
			return err
		}
		// A renewal is one transaction: what the rest costs is the rate less
		// the renewals'.
		span := (*window + 11*time.Second).Seconds()
		fmt.Printf("%s: renewal alone %s; database transactions %.1f/s over the window and the 11 s after (%.1f/s besides the renewals)\n",
			path, alone, quiet, quiet-float64(len(alone))/span)
		fmt.Printf("%s: renewal during 64 connections (%d calls, %.0f/s) %s; database transactions %.1f/s (%.1f/s besides the renewals)\n",
			path, calls, float64(calls)/window.Seconds(), during, loud, loud-float64(len(during))/span)
	}
	return nil
}

// flood runs workers goroutines looping on hit while measure runs, and
// returns the calls hit made.
func flood(workers int, hit, measure func() error) (int64, error) {
	var calls atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if hit() == nil {
					calls.Add(1)
				}
			}
		})
	}
	err := measure()
	close(stop)
	wg.Wait()
	return calls.Load(), err
}

// compare prints the renewer's latency for one window alone, then for one
// window while workers goroutines loop on hit, and the calls hit made.
func compare(r *renewer, what string, workers int, hit func() error) error {
	alone, err := r.run(*window)
	if err != nil {
		return err
	}
	var during latencies
	cpu0 := cpuTime()
	calls, err := flood(workers, hit, func() (err error) { during, err = r.run(*window); return err })
	cpu := cpuTime() - cpu0
	if err != nil {
		return err
	}
	fmt.Printf("renewal alone: %s\n", alone)
	fmt.Printf("renewal during %s: %s; %d calls (%.0f/s), gateway CPU %v over %v\n", what, during,
		calls, float64(calls)/window.Seconds(), cpu.Round(time.Millisecond), window)
	return nil
}

// renewer holds one lease of another client and renews it in a loop.
type renewer struct {
	name  string
	token int64
}

func newRenewer(name string) (*renewer, error) {
	b, _ := json.Marshal(map[string]any{"name": name, "owner_id": "other", "ttl_ms": 600000})
	rep, code, err := call("POST", "/v1/leases", "application/json", b, *tokenB)
	if err != nil || code != http.StatusCreated {
		return nil, fmt.Errorf("acquire %s: %d %s %v", name, code, rep, err)
	}
	var g struct{ Token int64 }
	if err := json.Unmarshal(rep, &g); err != nil {
		return nil, err
	}
	return &renewer{name: name, token: g.Token}, nil
}

// latencies are a window's renewal round trips.
type latencies []time.Duration

func (l latencies) String() string {
	slices.Sort(l)
	q := func(p float64) time.Duration { return l[int(p*float64(len(l)-1))].Round(10 * time.Microsecond) }
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", len(l), q(0.5), q(0.99), l[len(l)-1].Round(10*time.Microsecond))
}

// run renews one after another for d and returns the round trips.
func (r *renewer) run(d time.Duration) (latencies, error) {
	b, _ := json.Marshal(map[string]any{"owner_id": "other", "token": r.token, "ttl_ms": 600000})
	var l latencies
	for end := time.Now().Add(d); time.Now().Before(end); {
		t0 := time.Now()
		rep, code, err := call("PATCH", "/v1/leases/"+r.name, "application/json", b, *tokenB)
		if err != nil || code != http.StatusOK {
			return nil, fmt.Errorf("renew: %d %s %v", code, rep, err)
		}
		l = append(l, time.Since(t0))
	}
	return l, nil
}

func post(path, ctype string, body []byte, tok string) (int, error) {
	return do("POST", path, ctype, body, tok)
}

// do sends a request and returns its status; the body is read and dropped.
func do(method, path, ctype string, body []byte, tok string) (int, error) {
	_, code, err := call(method, path, ctype, body, tok)
	return code, err
}

// call sends a request and returns its answer's body and status (net/http
// sends any method made of token characters, of any length).
func call(method, path, ctype string, body []byte, tok string) ([]byte, int, error) {
	req, err := http.NewRequest(method, *base+path, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	rep, err := io.ReadAll(resp.Body)
	return rep, resp.StatusCode, err
}

// scrape reads /metrics and times it.
func scrape() (string, time.Duration, error) {
	t0 := time.Now()
	rep, code, err := call("GET", "/metrics", "", nil, "")
	took := time.Since(t0)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("/metrics: %d", code)
	}
	return string(rep), took, err
}

// cpuTime is the gateway process's user and system CPU time (clock ticks
// of 10 ms, /proc/PID/stat fields 14 and 15).
func cpuTime() time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", *pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// procStatus is a field of /proc/PID/status.
func procStatus(key string) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", *pid))
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == key {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "?"
}
