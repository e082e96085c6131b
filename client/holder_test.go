package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
)

// misdirecting is a gateway that grants and renews, and answers every
// batch 421 misdirected toward holderURL.
func misdirecting(holderURL *string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/leases":
			writeJSON(w, http.StatusCreated, map[string]any{"name": "shard:1", "owner_id": "w1", "token": 1,
				"expires_at": time.Now().Add(time.Minute), "ttl_ms": 60000, "topic": "shard-output", "partition": 1})
		case r.Method == http.MethodPost:
			w.Header().Set("Content-Type", "application/problem+json")
			writeJSON(w, http.StatusMisdirectedRequest, map[string]any{"type": "https://fencegate.dev/problems/misdirected",
				"title": "Misdirected Request", "status": 421, "code": "misdirected", "holder": "replica-9", "holder_url": *holderURL})
		case r.Method == http.MethodPatch:
			writeJSON(w, http.StatusOK, map[string]any{"name": "shard:1", "token": 1})
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}
}

// tokenSink is a host a 421 names; it records the requests it gets and
// answers a batch as a holder would.
type tokenSink struct {
	mu     sync.Mutex
	tokens []string
}

func (s *tokenSink) handler(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.tokens = append(s.tokens, r.Header.Get("Authorization"))
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"name": "shard:1", "token": 1, "topic": "shard-output", "partition": 1,
		"offsets": []int64{0}})
}

func (s *tokenSink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tokens...)
}

// TestFM42_HolderURLNeverTakesTheTokenAstray: the SDK follows a 421 only
// to the base URL's scheme and to a host its allow-list (by default the
// base host's domain) permits. Otherwise the 421 is a failed call, retried
// at the base URL, and the bearer token never leaves: the review saw six
// requests with the token reach a plain http:// host named in a 421 to an
// https:// client.
func TestFM42_HolderURLNeverTakesTheTokenAstray(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		tls    bool                          // the base URL is https
		holder func(*httptest.Server) string // holder_url from the sink
		hosts  []string
		follow bool
	}{
		{name: "https to http", tls: true, holder: func(s *httptest.Server) string { return s.URL }},
		{name: "another host", holder: func(s *httptest.Server) string {
			return strings.Replace(s.URL, "127.0.0.1", "localhost", 1)
		}},
		{name: "another host allowed", holder: func(s *httptest.Server) string {
			return strings.Replace(s.URL, "127.0.0.1", "localhost", 1)
		}, hosts: []string{"localhost"}, follow: true},
		{name: "same host another port", holder: func(s *httptest.Server) string { return s.URL }, follow: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sink := &tokenSink{}
			other := httptest.NewServer(http.HandlerFunc(sink.handler))
			defer other.Close()
			holder := c.holder(other)
			var gw *httptest.Server
			if c.tls {
				gw = httptest.NewTLSServer(misdirecting(&holder))
			} else {
				gw = httptest.NewServer(misdirecting(&holder))
			}
			defer gw.Close()
			cl, err := client.New(client.Config{BaseURL: gw.URL, Token: "secret-token", Owner: "w1", TTL: 10 * time.Second,
				MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, HTTP: gw.Client(), HolderHosts: c.hosts})
			if err != nil {
				t.Fatal(err)
			}
			l, err := cl.Acquire(context.Background(), "shard:1")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = l.Release(context.Background()) }()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err = l.Produce(ctx, "b1", rec)
			got := sink.got()
			if c.follow {
				if err != nil || len(got) == 0 {
					t.Fatalf("produce: %v after %d requests to the holder, want it followed", err, len(got))
				}
				return
			}
			if len(got) > 0 {
				t.Fatalf("%d requests reached %s, the first with Authorization %q", len(got), holder, got[0])
			}
			if err == nil || !strings.Contains(err.Error(), "holder") {
				t.Fatalf("produce: %v, want the refused holder named", err)
			}
			raw, _ := json.Marshal(err.Error())
			t.Logf("produce: %s", raw)
		})
	}
}
