package client_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client/wire"
)

// fakeGateway answers the SDK as a gateway would (each lease with a token
// of its own; a grant is never refused as held), except for the replies a
// test scripts: those are the real gateway's replies, recorded in
// testdata/replies (sdktest's TestRecordedRepliesMatchTheGateway keeps
// them true). Claims about the real gateway are tested in sdktest;
// these tests are about what the SDK does with each answer.
type fakeGateway struct {
	srv, other *httptest.Server // other: a second replica's address, for 421

	mu     sync.Mutex
	tokens map[string]int64 // lease name -> current token
	owner  string
	offset int64
	script map[string][]string // kind -> replies to send before the normal answer
	log    []string            // "kind token [batch] @server"
	ttls   map[string][]int64  // kind -> the ttl_ms of each request

	checkpoints map[string]map[string]any // lease name -> the checkpoint member of its reads
	batches     []sentBatch               // every produce request, in order
	waits       []string                  // the wait parameter of each checkpoint read

	streams []chan string // open watch streams; each gets what push sends
	opened  chan string   // the path and Last-Event-ID of each stream opened
}

// sentBatch is what one produce request carried.
type sentBatch struct {
	contentType string
	version     byte // of a binary body: the byte after "FGB"
	token       int64
	batchID     string
	checkpoint  []byte // nil: none
}

// Request kinds.
const (
	kAcquire    = "acquire"
	kRegenerate = "regenerate"
	kRenew      = "renew"
	kProduce    = "produce"
	kRelease    = "release"
	kCheckpoint = "checkpoint"
)

// newFakeGateway starts the fake; tb (a test, or nil for an example)
// closes it at its end, after the test's own cleanups.
func newFakeGateway(tb testing.TB) *fakeGateway {
	f := &fakeGateway{script: map[string][]string{}, ttls: map[string][]int64{}, tokens: map[string]int64{},
		checkpoints: map[string]map[string]any{}, opened: make(chan string, 1024)}
	f.srv = httptest.NewServer(f.handler("a"))
	f.other = httptest.NewServer(f.handler("b"))
	if tb != nil {
		tb.Cleanup(f.Close)
	}
	return f
}

func (f *fakeGateway) Close() { f.srv.Close(); f.other.Close() }

// answer scripts replies (recorded names, "transport", or a code to
// synthesize) for the next requests of kind.
func (f *fakeGateway) answer(kind string, replies ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script[kind] = append(f.script[kind], replies...)
}

func (f *fakeGateway) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.log...)
}

// ttl returns the ttl_ms of the requests of kind so far.
func (f *fakeGateway) ttl(kind string) []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.ttls[kind]...)
}

func (f *fakeGateway) count(prefix string) int {
	n := 0
	for _, r := range f.requests() {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

func (f *fakeGateway) handler(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/events") {
			f.serveEvents(w, r) // watch streams: not logged (watch_test.go)
			return
		}
		var body struct {
			Name    string `json:"name"`
			Owner   string `json:"owner_id"`
			Token   int64  `json:"token"`
			TTL     int64  `json:"ttl_ms"`
			BatchID string `json:"batch_id"`
			Records []any  `json:"records"`
		}
		sent := sentBatch{contentType: r.Header.Get("Content-Type")}
		if r.Header.Get("Content-Type") == wire.ContentType {
			raw, _ := io.ReadAll(r.Body)
			b, err := wire.Decode(raw, wire.Limits{Records: 1 << 20, Headers: 1 << 20, HeaderBytes: 1 << 30, Checkpoint: 1 << 16})
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body.Owner, body.Token, body.BatchID = b.OwnerID, b.Token, b.BatchID
			body.Records = make([]any, len(b.Records))
			sent.version, sent.checkpoint = raw[3], b.Checkpoint
		} else {
			_ = json.NewDecoder(r.Body).Decode(&body)
		}
		if name, ok := strings.CutPrefix(r.URL.Path, "/v1/leases/"); ok {
			body.Name = strings.TrimSuffix(strings.TrimSuffix(name, "/records"), "/checkpoint")
		}
		kind := ""
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/leases" && body.Token == 0:
			kind = kAcquire
		case r.Method == http.MethodPost && r.URL.Path == "/v1/leases":
			kind = kRegenerate
		case r.Method == http.MethodPatch:
			kind = kRenew
		case r.Method == http.MethodPost:
			kind = kProduce
			sent.token, sent.batchID = body.Token, body.BatchID
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/checkpoint"):
			kind = kCheckpoint
			body.Owner = r.URL.Query().Get("owner_id")
			body.Token, _ = strconv.ParseInt(r.URL.Query().Get("token"), 10, 64)
		case r.Method == http.MethodDelete:
			kind = kRelease
			body.Token, _ = strconv.ParseInt(r.URL.Query().Get("token"), 10, 64)
		}
		f.mu.Lock()
		if body.TTL != 0 {
			f.ttls[kind] = append(f.ttls[kind], body.TTL)
		}
		switch kind {
		case kProduce:
			f.batches = append(f.batches, sent)
		case kCheckpoint:
			f.waits = append(f.waits, r.URL.Query().Get("wait"))
		}
		f.log = append(f.log, strings.Join(slices.DeleteFunc([]string{kind, strconv.FormatInt(body.Token, 10), body.BatchID, "@" + name},
			func(s string) bool { return s == "" }), " "))
		var scripted string
		if q := f.script[kind]; len(q) > 0 {
			scripted, f.script[kind] = q[0], q[1:]
		}
		if scripted == unanswered {
			f.mu.Unlock()
			<-r.Context().Done() // a replica that stopped: no answer until the client gives up
			return
		}
		if scripted == landedThenTransport {
			f.commitLocked(body.Name, body.Owner, sent, len(body.Records))
			f.mu.Unlock()
			panic(http.ErrAbortHandler)
		}
		if scripted != "" {
			f.mu.Unlock()
			f.reply(w, scripted)
			return
		}
		defer f.mu.Unlock()
		lost := func() { f.replyLocked(w, "lease_lost_session") }
		switch kind {
		case kAcquire:
			f.tokens[body.Name]++
			f.owner = body.Owner
			f.grantLocked(w, body.Name, http.StatusCreated)
		case kRegenerate:
			if body.Token != f.tokens[body.Name] {
				lost()
				return
			}
			f.tokens[body.Name]++
			f.grantLocked(w, body.Name, http.StatusCreated)
		case kRenew:
			if body.Token != f.tokens[body.Name] {
				lost()
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"name": body.Name, "token": body.Token, "expires_at": time.Now().Add(time.Minute)})
		case kProduce:
			if body.Token != f.tokens[body.Name] {
				lost()
				return
			}
			writeJSON(w, http.StatusOK, f.commitLocked(body.Name, body.Owner, sent, len(body.Records)))
		case kCheckpoint:
			if body.Token != f.tokens[body.Name] {
				lost()
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"name": body.Name, "token": body.Token, "checkpoint": f.checkpoints[body.Name]})
		case kRelease:
			if body.Token != f.tokens[body.Name] {
				lost()
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}
	}
}

// unanswered, scripted for a request, never answers it: a stopped
// replica, or a balancer holding the request there.
const unanswered = "unanswered"

// landedThenTransport, scripted for a produce, commits the batch and then
// drops the connection: a batch that landed although the worker never
// heard so.
const landedThenTransport = "landed_then_transport"

// commitLocked commits a batch of n records (and its checkpoint) and
// returns the 200 answer.
func (f *fakeGateway) commitLocked(name, owner string, b sentBatch, n int) map[string]any {
	offs := make([]int64, n)
	for i := range offs {
		offs[i] = f.offset
		f.offset++
	}
	res := map[string]any{"name": name, "token": b.token, "topic": "shard-output",
		"partition": 1, "offsets": offs, "producer_epoch": b.token}
	if b.checkpoint != nil {
		f.checkpoints[name] = map[string]any{"token": b.token, "owner_id": owner, "batch_id": b.batchID,
			"partition": 1, "offset": f.offset, "value": map[string]any{"type": "BINARY", "data": b.checkpoint}}
		res["checkpoint_offset"] = f.offset
		f.offset++
	}
	return res
}

// sent returns the produce requests so far.
func (f *fakeGateway) sent() []sentBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sentBatch(nil), f.batches...)
}

// waited returns the wait parameters of the checkpoint reads so far.
func (f *fakeGateway) waited() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.waits...)
}

func (f *fakeGateway) grantLocked(w http.ResponseWriter, name string, status int) {
	token := f.tokens[name]
	writeJSON(w, status, map[string]any{"name": name, "owner_id": f.owner, "token": token,
		"expires_at": time.Now().Add(time.Minute), "ttl_ms": 60000, "topic": "shard-output", "partition": 1,
		"transactional_id": "fencegate/" + name, "producer_id": 7, "producer_epoch": token})
}

func (f *fakeGateway) reply(w http.ResponseWriter, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replyLocked(w, name)
}

// replyLocked sends a recorded reply (holder_url pointed at the other
// replica), drops the connection ("transport"), or synthesizes a problem
// for a code without a recording.
func (f *fakeGateway) replyLocked(w http.ResponseWriter, name string) {
	if name == "transport" {
		panic(http.ErrAbortHandler)
	}
	doc := map[string]any{}
	raw, err := os.ReadFile(filepath.Join("testdata", "replies", name+".json"))
	if err == nil {
		if err := json.Unmarshal(raw, &doc); err != nil {
			panic(err)
		}
	} else {
		status := map[string]int{"batch_aborted": 503, "store_unavailable": 503, "kafka_unavailable": 503,
			"too_many_requests": 429, "internal": 500}[name]
		if status == 0 {
			panic("no recorded reply " + name)
		}
		doc = map[string]any{"type": "https://fencegate.dev/problems/" + name, "title": http.StatusText(status),
			"status": status, "code": name}
	}
	if _, ok := doc["holder_url"]; ok {
		doc["holder_url"] = f.other.URL
	}
	switch doc["code"] {
	case "too_many_requests", "ledger_behind":
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/problem+json")
	writeJSON(w, int(toFloat(doc["status"])), doc)
}

func toFloat(v any) float64 {
	switch n := v.(type) {
	case float64:
		return n
	case int:
		return float64(n)
	}
	return 500
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
