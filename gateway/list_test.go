package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/gateway"
)

// listPage is one GET /v1/leases reply.
type listPage struct {
	Leases []struct{ Name string } `json:"leases"`
	Next   string                  `json:"next"`
}

func (r *replica) listAs(t *testing.T, token, query string) listPage {
	t.Helper()
	rep := r.doAs(t, token, "GET", "/v1/leases"+query, nil)
	if rep.status != http.StatusOK {
		t.Fatalf("list %s: %d %s", query, rep.status, rep.raw)
	}
	var p listPage
	if err := json.Unmarshal(rep.raw, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// listAll follows next from the first page of query and returns every
// name, failing on a name seen twice or out of order.
func (r *replica) listAll(t *testing.T, token, query string) []string {
	t.Helper()
	var names []string
	for after := ""; ; {
		q := query
		if after != "" {
			q += "&after=" + url.QueryEscape(after)
		}
		p := r.listAs(t, token, q)
		for _, l := range p.Leases {
			if len(names) > 0 && l.Name <= names[len(names)-1] {
				t.Fatalf("list %s: %s after %s", q, l.Name, names[len(names)-1])
			}
			names = append(names, l.Name)
		}
		if p.Next == "" {
			return names
		}
		if p.Next <= after {
			t.Fatalf("list %s: next %q does not move past %q", q, p.Next, after)
		}
		after = p.Next
	}
}

// TestFM40_OneTenantsLeasesDoNotHideAnothers: tenant a holds 1,100
// leases, tenant b three whose names sort after them. b's listing shows
// its three; a's, followed page by page through next, every one of its
// own exactly once and none of b's. Before, the store applied LIMIT 1000
// first and the client's patterns after: b's listing was [].
func TestFM40_OneTenantsLeasesDoNotHideAnothers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth, err := gateway.NewAuthenticator([]fileconfig.Client{
		{Name: "tenant-a", TokenSHA256: gateway.HashToken("a-token"), Allow: []string{"a:*"}},
		{Name: "tenant-b", TokenSHA256: gateway.HashToken("b-token"), Allow: []string{"b:*"}},
		{Name: "tenant-b1", TokenSHA256: gateway.HashToken("b1-token"), Allow: []string{"b:1?"}},
		{Name: "sparse", TokenSHA256: gateway.HashToken("sparse-token"), Allow: []string{"a:*x", "b:2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.auth = auth
	r := b.newReplica(nil)
	// The rows as a flood of acquires leaves them (a grant in Postgres;
	// no route is needed to list them).
	var aNames []string
	for i := range 1100 {
		aNames = append(aNames, fmt.Sprintf("a:%04d", i))
	}
	for _, n := range append(slices.Clone(aNames), "b:10", "b:11", "b:2") {
		if _, err := b.store.Acquire(b.ctx, n, "w", time.Minute, "replica-1", "tenant-"+n[:1], ""); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.listAll(t, "b-token", "?prefix="); !slices.Equal(got, []string{"b:10", "b:11", "b:2"}) {
		t.Fatalf("tenant b lists %v, want its three leases", got)
	}
	if got := r.listAll(t, "b1-token", "?prefix=b:"); !slices.Equal(got, []string{"b:10", "b:11"}) {
		t.Fatalf("a client allowed b:1? lists %v, want b:10 b:11", got)
	}
	if got := r.listAll(t, "a-token", "?limit=300"); !slices.Equal(got, aNames) {
		t.Fatalf("tenant a lists %d leases through next (first %v), want its %d", len(got), got[:min(3, len(got))], len(aNames))
	}
	if p := r.listAs(t, "a-token", "?limit=300"); len(p.Leases) != 300 || p.Next != "a:0299" {
		t.Fatalf("first page of 300: %d leases, next %q", len(p.Leases), p.Next)
	}
	// A pattern that matches none of the 1,100 names under its literal
	// prefix: each request reads a bounded number of pages (100 rows at
	// limit=1) and hands back a cursor; following it ends at b:2.
	if p := r.listAs(t, "sparse-token", "?limit=1"); len(p.Leases) != 0 || p.Next == "" {
		t.Fatalf("first page of a sparse pattern: %d leases, next %q, want none and a cursor", len(p.Leases), p.Next)
	}
	if got := r.listAll(t, "sparse-token", "?limit=1"); !slices.Equal(got, []string{"b:2"}) {
		t.Fatalf("a client allowed a:*x and b:2 lists %v, want b:2", got)
	}
	if p := r.listAs(t, "a-token", "?prefix=a:10&after=a:1049"); len(p.Leases) != 50 || p.Next != "" {
		t.Fatalf("after a:1049 in a:10: %d leases, next %q, want the last 50 and no next", len(p.Leases), p.Next)
	}
}

// TestFM40_BadListQueriesAre400: a prefix or cursor that no lease name
// can hold (not UTF-8, a NUL) and a limit out of range are 400
// invalid_request, with no ERROR logged; so is a limit given empty, which
// is not the integer the document's limit is (schemathesis found it taken
// for no limit). Before, %00 and %ff reached
// Postgres, which refused them: 503 store_unavailable and an ERROR line,
// from any client.
func TestFM40_BadListQueriesAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	for _, q := range []string{"?prefix=%00", "?prefix=%ff", "?prefix=shard:%c3", "?after=%00", "?after=%ff",
		"?limit=0", "?limit=-1", "?limit=1001", "?limit=x", "?limit=", "?prefix=a&limit="} {
		rep := r.do(t, "GET", "/v1/leases"+q, nil)
		if rep.status != http.StatusBadRequest || rep.code() != "invalid_request" {
			t.Errorf("GET /v1/leases%s: %d %s, want 400 invalid_request", q, rep.status, rep.raw)
		}
	}
}
