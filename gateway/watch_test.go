package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

// sseEvent is one event of a watch stream as a client reads it.
type sseEvent struct {
	id   int64
	kind string
	data gateway.WatchEvent
}

// sseStream is an open watch stream read in the background.
type sseStream struct {
	resp     *http.Response
	events   chan sseEvent
	comments chan string
	ended    chan struct{}
	cancel   context.CancelFunc
}

// watchTimeout bounds every wait for a notice in these tests (a deadline,
// not a sleep).
const watchTimeout = 10 * time.Second

// watch makes r serve watch streams until the test ends.
func (r *replica) watch(t testing.TB, b *testBundle, cfg gateway.WatchConfig) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := r.server.Watch(ctx, b.store, cfg); err != nil {
		t.Fatal(err)
	}
	return cancel
}

// openStream opens path as token with Last-Event-ID last (-1: none) and
// returns the stream, or the refusal's reply.
func (r *replica) openStream(t testing.TB, token, path string, last int64) (*sseStream, reply) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if last >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(last, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		var rep reply
		rep.status = resp.StatusCode
		_ = json.NewDecoder(resp.Body).Decode(&rep.body)
		return nil, rep
	}
	s := &sseStream{resp: resp, events: make(chan sseEvent, 1024), comments: make(chan string, 1024),
		ended: make(chan struct{}), cancel: cancel}
	go s.read()
	t.Cleanup(s.close)
	// The stream is open (its first comment) before the test moves on.
	select {
	case <-s.comments:
	case <-time.After(watchTimeout):
		t.Fatal("stream sent no opening comment")
	}
	return s, reply{status: http.StatusOK}
}

// mustStream is openStream that must succeed.
func (r *replica) mustStream(t testing.TB, token, path string, last int64) *sseStream {
	t.Helper()
	s, rep := r.openStream(t, token, path, last)
	if s == nil {
		t.Fatalf("GET %s: %d %v", path, rep.status, rep.body)
	}
	return s
}

func (s *sseStream) close() { s.cancel(); _ = s.resp.Body.Close() }

func (s *sseStream) read() {
	defer close(s.ended)
	sc := bufio.NewScanner(s.resp.Body)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ": "):
			s.comments <- strings.TrimPrefix(line, ": ")
		case strings.HasPrefix(line, "id: "):
			ev.id, _ = strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
		case strings.HasPrefix(line, "event: "):
			ev.kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data)
		case line == "" && ev.id != 0:
			s.events <- ev
			ev = sseEvent{}
		}
	}
}

// next returns the next event, failing after watchTimeout.
func (s *sseStream) next(t testing.TB) sseEvent {
	t.Helper()
	select {
	case e := <-s.events:
		return e
	case <-s.ended:
		t.Fatal("stream ended")
	case <-time.After(watchTimeout):
		t.Fatal("no event within the timeout")
	}
	return sseEvent{}
}

// kinds reads n events and returns "kind/name ..." for them.
func (s *sseStream) kinds(t testing.TB, n int) (string, []sseEvent) {
	t.Helper()
	var out []string
	var evs []sseEvent
	for range n {
		e := s.next(t)
		if len(evs) > 0 && e.id <= evs[len(evs)-1].id {
			t.Fatalf("event %d after %d: ids must increase", e.id, evs[len(evs)-1].id)
		}
		if e.data.ID != e.id || e.data.Kind != e.kind {
			t.Fatalf("event data %+v does not match id %d kind %s", e.data, e.id, e.kind)
		}
		evs = append(evs, e)
		out = append(out, e.kind+"/"+e.data.Name)
	}
	return strings.Join(out, " "), evs
}

// quiet checks that no event is queued beyond those read.
func (s *sseStream) quiet(t testing.TB) {
	t.Helper()
	select {
	case e := <-s.events:
		t.Fatalf("unexpected event %d %s of %s", e.id, e.kind, e.data.Name)
	default:
	}
}

func (r *replica) release(t testing.TB, name, owner string, token int64) {
	t.Helper()
	if rep := r.do(t, "DELETE", fmt.Sprintf("/v1/leases/%s?owner_id=%s&token=%d", name, owner, token), nil); rep.status != http.StatusNoContent {
		t.Fatalf("release %s: %d %s", name, rep.status, rep.raw)
	}
}

func TestWatchStreamsTransitionsNotRenewals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	r.watch(t, b, gateway.WatchConfig{})
	s := r.mustStream(t, devToken, "/v1/leases/shard:w1/events", -1)
	tok := r.mustAcquire(t, "shard:w1", "w1", 30*time.Second)
	if rep := r.do(t, "PATCH", "/v1/leases/shard:w1", map[string]any{"owner_id": "w1", "token": tok, "ttl_ms": 30000}); rep.status != http.StatusOK {
		t.Fatalf("renew: %d %s", rep.status, rep.raw)
	}
	r.mustAcquire(t, "shard:w2", "w1", 30*time.Second) // another lease: not on this stream
	r.release(t, "shard:w1", "w1", tok)
	got, evs := s.kinds(t, 3)
	if got != "acquired/shard:w1 activated/shard:w1 released/shard:w1" {
		t.Fatalf("events %s, want acquired, activated, released (no renewal)", got)
	}
	if evs[0].data.Token != tok || evs[0].data.OwnerID != "w1" {
		t.Fatalf("acquired event %+v, want token %d of w1", evs[0].data, tok)
	}
	s.quiet(t)
}

func TestWatchResumesFromLastEventIDOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	r.watch(t, b, gateway.WatchConfig{})
	s := r.mustStream(t, devToken, "/v1/events?prefix=shard:r", -1)
	tok := r.mustAcquire(t, "shard:r1", "w1", 30*time.Second)
	_, first := s.kinds(t, 2) // acquired, activated
	s.close()
	r.release(t, "shard:r1", "w1", tok)
	tok2 := r.mustAcquire(t, "shard:r2", "w1", 30*time.Second)
	r.release(t, "shard:r2", "w1", tok2)
	// Resumed after the first event: the second again, then every
	// event missed while away, each once, then the live ones.
	s2 := r.mustStream(t, devToken, "/v1/events?prefix=shard:r", first[0].id)
	got, _ := s2.kinds(t, 5)
	want := "activated/shard:r1 released/shard:r1 acquired/shard:r2 activated/shard:r2 released/shard:r2"
	if got != want {
		t.Fatalf("resumed events %s, want %s", got, want)
	}
	r.mustAcquire(t, "shard:r3", "w1", 30*time.Second)
	if got, _ := s2.kinds(t, 2); got != "acquired/shard:r3 activated/shard:r3" {
		t.Fatalf("live events after the catch-up: %s", got)
	}
	s2.quiet(t)
}

func TestWatchIsAuthorisedLikeReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	r.watch(t, b, gateway.WatchConfig{})
	if _, rep := r.openStream(t, "narrow-token", "/v1/leases/shard:200/events", -1); rep.status != http.StatusForbidden {
		t.Fatalf("narrow client on shard:200's stream: %d, want 403", rep.status)
	}
	if _, rep := r.openStream(t, "", "/v1/events", -1); rep.status != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", rep.status)
	}
	narrow := r.mustStream(t, "narrow-token", "/v1/events?prefix=shard:", -1)
	other := r.mustStream(t, otherToken, "/v1/events?prefix=shard:", -1)
	r.mustAcquire(t, "shard:200", "w1", 30*time.Second)
	tok := r.mustAcquire(t, "shard:12", "w1", 30*time.Second)
	if got, _ := narrow.kinds(t, 2); got != "acquired/shard:12 activated/shard:12" {
		t.Fatalf("narrow client saw %s, want only shard:12's events", got)
	}
	_, evs := other.kinds(t, 4)
	for _, e := range evs {
		if e.data.Token != 0 {
			t.Fatalf("another client saw token %d of worker's lease %s (FM38)", e.data.Token, e.data.Name)
		}
	}
	r.release(t, "shard:12", "w1", tok)
}

func TestWatchStreamsAreBoundedPerClientAndInTotal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	r.watch(t, b, gateway.WatchConfig{MaxStreams: 2, MaxStreamsPerClient: 1})
	r.mustStream(t, devToken, "/v1/events", -1)
	if _, rep := r.openStream(t, devToken, "/v1/events", -1); rep.status != http.StatusTooManyRequests {
		t.Fatalf("second stream of one client: %d, want 429", rep.status)
	}
	r.mustStream(t, otherToken, "/v1/events", -1)
	if _, rep := r.openStream(t, opsToken, "/v1/events", -1); rep.status != http.StatusTooManyRequests {
		t.Fatalf("third stream of the replica: %d, want 429", rep.status)
	}
}

// TestWatchStreamsGauge: fencegate_watch_streams counts the replica's
// open streams, 0 before any and again after they end (the drain's log
// line was the only count).
func TestWatchStreamsGauge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mod, serve := withMetrics(t)
	r := b.newReplica(mod)
	serve(r)
	r.watch(t, b, gateway.WatchConfig{})
	gauge := func() float64 {
		v, ok := scrapeMetrics(t, r.metricsURL).value("fencegate_watch_streams", nil)
		if !ok {
			t.Fatal("/metrics has no fencegate_watch_streams")
		}
		return v
	}
	if v := gauge(); v != 0 {
		t.Fatalf("streams before any: %v", v)
	}
	s1 := r.mustStream(t, devToken, "/v1/events", -1)
	r.mustStream(t, otherToken, "/v1/leases/shard:g1/events", -1)
	if v := gauge(); v != 2 {
		t.Fatalf("streams with two open: %v, want 2", v)
	}
	s1.close()
	deadline := time.After(watchTimeout)
	for gauge() != 1 {
		select {
		case <-deadline:
			t.Fatalf("streams after one closed: %v, want 1", gauge())
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.server.DrainStreams()
	for gauge() != 0 {
		select {
		case <-deadline:
			t.Fatalf("streams after the drain: %v, want 0", gauge())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestWatchDrainEndsStreamsCleanly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	r.watch(t, b, gateway.WatchConfig{})
	s1 := r.mustStream(t, devToken, "/v1/events", -1)
	s2 := r.mustStream(t, otherToken, "/v1/leases/shard:d1/events", -1)
	if n := r.server.DrainStreams(); n != 2 {
		t.Fatalf("drain ended %d streams, want 2", n)
	}
	for _, s := range []*sseStream{s1, s2} {
		select {
		case <-s.ended:
		case <-time.After(watchTimeout):
			t.Fatal("a stream outlived the drain")
		}
		if c := <-s.comments; c != "draining" {
			t.Fatalf("last comment %q, want draining", c)
		}
	}
	if _, rep := r.openStream(t, devToken, "/v1/events", -1); rep.status != http.StatusServiceUnavailable {
		t.Fatalf("stream after the drain: %d, want 503 draining", rep.status)
	}
}

func TestWatchStreamOutlivesTheWriteTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	// The server cuts a reply WriteTimeout after its headers; a stream
	// moves its own deadline forward with each write.
	const timeout = 300 * time.Millisecond
	r.watch(t, b, gateway.WatchConfig{Heartbeat: 50 * time.Millisecond, WriteTimeout: timeout})
	cut := httptest.NewUnstartedServer(r.server)
	cut.Config.WriteTimeout = timeout
	cut.Start()
	t.Cleanup(cut.Close)
	rc := *r
	rc.srv = cut
	s := rc.mustStream(t, devToken, "/v1/leases/shard:t1/events", -1)
	start := time.Now()
	for beats := 0; time.Since(start) < 3*timeout; beats++ {
		select {
		case <-s.comments:
		case <-s.ended:
			t.Fatalf("stream cut after %s (%d heartbeats)", time.Since(start), beats)
		case <-time.After(watchTimeout):
			t.Fatal("no heartbeat")
		}
	}
	r.mustAcquire(t, "shard:t1", "w1", 30*time.Second)
	if e := s.next(t); e.kind != "acquired" {
		t.Fatalf("event after three write timeouts: %s", e.kind)
	}
}

func TestWatchRefusesABadLastEventID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	r.watch(t, b, gateway.WatchConfig{})
	for _, v := range []string{"x", "-2", "1.5"} {
		req, _ := http.NewRequest(http.MethodGet, r.srv.URL+"/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+devToken)
		req.Header.Set("Last-Event-ID", v)
		if rep := send(t, req); rep.status != http.StatusBadRequest {
			t.Fatalf("Last-Event-ID %q: %d, want 400", v, rep.status)
		}
	}
}

// TestOpenAPIWatchRefusalsMatchTheDocument: the watch routes' refusals
// are the document's (the 200 stream is checked by the tests above).
func TestOpenAPIWatchRefusalsMatchTheDocument(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	r.watch(t, b, gateway.WatchConfig{})
	c := newContract(t, r)
	expect(t, "a lease outside the patterns", c.call(t, r, "narrow-token", "GET", "/v1/leases/shard:200/events", nil, false),
		http.StatusForbidden, "forbidden")
	expect(t, "no token", c.call(t, r, "", "GET", "/v1/events?prefix=shard:", nil, false),
		http.StatusUnauthorized, "unauthorized")
	expect(t, "a prefix no name can hold", c.call(t, r, devToken, "GET", "/v1/events?prefix=%FF", nil, true),
		http.StatusBadRequest, "invalid_request")
	r.server.DrainStreams()
	expect(t, "a draining replica", c.call(t, r, devToken, "GET", "/v1/leases/shard:1/events", nil, false),
		http.StatusServiceUnavailable, "draining")
}

// TestWatchStreamFallingBehindLosesNothing: a stream whose queue holds one
// event falls behind a burst (the relay hands out 50 events at once),
// reads the rest from the outbox, and still sends every event once, in id
// order.
func TestWatchStreamFallingBehindLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	r.watch(t, b, gateway.WatchConfig{Buffer: 1})
	s := r.mustStream(t, devToken, "/v1/events?prefix=shard:b", -1)
	// A burst the relay reads at once: 50 events of one transaction.
	const burst = 50
	if _, err := b.db.Pool.Exec(context.Background(), `INSERT INTO lease_events (name, kind, token, owner_id, holder, expires_at)
		SELECT 'shard:b' || i, 'released', i, 'w1', 'replica-1', now() FROM generate_series(1, $1) AS i`, burst); err != nil {
		t.Fatal(err)
	}
	_, evs := s.kinds(t, burst) // ids increase: none twice, in order
	rd, err := b.store.EventsAfter(context.Background(), evs[0].id-1, 100)
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	for _, e := range rd.Events {
		if strings.HasPrefix(e.Name, "shard:b") && e.ID <= evs[len(evs)-1].id {
			want = append(want, e.ID)
		}
	}
	var got []int64
	for _, e := range evs {
		got = append(got, e.id)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stream sent %v, the outbox holds %v", got, want)
	}
	s.quiet(t)
}
