package gateway_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

// TestFM17_AuthAndAuthorization: no or unknown credentials are 401;
// a lease outside the client's patterns is 403 on every route.
func TestFM17_AuthAndAuthorization(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:200", "w1", 30*time.Second)
	produce := batchBody("w1", token, "b", 1)
	cases := []struct {
		name   string
		bearer string
		method string
		path   string
		body   any
		status int
		code   string
	}{
		{"no credentials acquire", "", "POST", "/v1/leases", map[string]any{"name": "shard:1", "owner_id": "w", "ttl_ms": 1000}, 401, "unauthorized"},
		{"no credentials produce", "", "POST", "/v1/leases/shard:200/records", produce, 401, "unauthorized"},
		{"no credentials list", "", "GET", "/v1/leases", nil, 401, "unauthorized"},
		{"unknown token", "nope", "POST", "/v1/leases/shard:200/records", produce, 401, "unauthorized"},
		{"outside pattern acquire", "narrow-token", "POST", "/v1/leases", map[string]any{"name": "shard:200", "owner_id": "w", "ttl_ms": 1000}, 403, "forbidden"},
		{"outside pattern produce", "narrow-token", "POST", "/v1/leases/shard:200/records", produce, 403, "forbidden"},
		{"outside pattern renew", "narrow-token", "PATCH", "/v1/leases/shard:200", map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 1000}, 403, "forbidden"},
		{"outside pattern release", "narrow-token", "DELETE", fmt.Sprintf("/v1/leases/shard:200?owner_id=w1&token=%d", token), nil, 403, "forbidden"},
		{"no route", devToken, "POST", "/v1/leases", map[string]any{"name": "other:1", "owner_id": "w", "ttl_ms": 1000}, 403, "forbidden"},
	}
	for _, tc := range cases {
		rep := r.doAs(t, tc.bearer, tc.method, tc.path, tc.body)
		if rep.status != tc.status || rep.code() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, rep.status, rep.raw, tc.status, tc.code)
		}
		if ct := rep.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
			t.Errorf("%s: content type %q", tc.name, ct)
		}
	}
	if rep := r.doAs(t, "narrow-token", "POST", "/v1/leases", map[string]any{"name": "shard:12", "owner_id": "w", "ttl_ms": 5000}); rep.status != http.StatusCreated {
		t.Fatalf("inside pattern: %d %s", rep.status, rep.raw)
	}
	b.mustProduce(t, r, &ackLog{}, "shard:200", "w1", token, "still-fine", 1)
}

func rec(key, value string) map[string]any {
	return map[string]any{"key": map[string]any{"type": "STRING", "data": key}, "value": map[string]any{"type": "STRING", "data": value}}
}

// TestFM19_BadInputRefusedNothingWritten: every malformed request gets a
// 4xx problem with a stable code; nothing is written and the session
// still works.
func TestFM19_BadInputRefusedNothingWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(func(c *gateway.Config) {
		c.Limits = gateway.Limits{MaxRecords: 10, MaxRecordBytes: 1024, MaxRequestBytes: 64 << 10}
	})
	token := r.mustAcquire(t, "shard:19", "w1", 30*time.Second)
	path := "/v1/leases/shard:19/records"
	big := strings.Repeat("x", 2000)
	many := make([]any, 11)
	for i := range many {
		many[i] = rec("k", "v")
	}
	base := func(mod func(m map[string]any)) map[string]any {
		m := map[string]any{"owner_id": "w1", "token": token, "batch_id": "b1", "records": []any{rec("k", "v")}}
		mod(m)
		return m
	}
	cases := []struct {
		name   string
		method string
		path   string
		body   any
		status int
		code   string
	}{
		{"malformed json", "POST", path, `{"owner_id": "w1",`, 400, "invalid_request"},
		{"not an object", "POST", path, `[1,2]`, 400, "invalid_request"},
		{"trailing data", "POST", path, `{"owner_id":"w1"} {}`, 400, "invalid_request"},
		{"token as string", "POST", path, base(func(m map[string]any) { m["token"] = fmt.Sprint(token) }), 400, "invalid_request"},
		{"token as float", "POST", path, base(func(m map[string]any) { m["token"] = 1.5 }), 400, "invalid_request"},
		{"missing token", "POST", path, base(func(m map[string]any) { delete(m, "token") }), 400, "invalid_request"},
		{"negative token", "POST", path, base(func(m map[string]any) { m["token"] = -1 }), 400, "invalid_request"},
		{"missing owner", "POST", path, base(func(m map[string]any) { delete(m, "owner_id") }), 400, "invalid_request"},
		{"missing batch id", "POST", path, base(func(m map[string]any) { delete(m, "batch_id") }), 400, "invalid_request"},
		{"no records", "POST", path, base(func(m map[string]any) { m["records"] = []any{} }), 400, "invalid_request"},
		{"topic field", "POST", path, base(func(m map[string]any) { m["topic"] = "elsewhere" }), 400, "invalid_request"},
		{"partition field", "POST", path, base(func(m map[string]any) { m["partition"] = 3 }), 400, "invalid_request"},
		{"bad base64", "POST", path, base(func(m map[string]any) {
			m["records"] = []any{map[string]any{"value": map[string]any{"type": "BINARY", "data": "!!!"}}}
		}), 400, "invalid_request"},
		{"unknown record type", "POST", path, base(func(m map[string]any) {
			m["records"] = []any{map[string]any{"value": map[string]any{"type": "AVRO", "data": "x"}}}
		}), 400, "invalid_request"},
		{"reserved header", "POST", path, base(func(m map[string]any) {
			m["records"] = []any{map[string]any{"value": map[string]any{"type": "STRING", "data": "x"}, "headers": map[string]string{"fencegate-token": "999"}}}
		}), 400, "invalid_request"},
		{"too many records", "POST", path, base(func(m map[string]any) { m["records"] = many }), 413, "payload_too_large"},
		{"record too large", "POST", path, base(func(m map[string]any) { m["records"] = []any{rec("k", big)} }), 413, "payload_too_large"},
		{"body too large", "POST", path, base(func(m map[string]any) {
			m["records"] = []any{map[string]any{"value": map[string]any{"type": "BINARY", "data": base64.StdEncoding.EncodeToString(make([]byte, 70<<10))}}}
		}), 413, "payload_too_large"},
		{"invalid utf8 name", "POST", "/v1/leases", []byte("{\"name\":\"shard:\xff\",\"owner_id\":\"w\",\"ttl_ms\":1000}"), 400, "invalid_request"},
		{"name with slash", "POST", "/v1/leases", map[string]any{"name": "shard:1/2", "owner_id": "w", "ttl_ms": 1000}, 400, "invalid_request"},
		{"negative ttl", "POST", "/v1/leases", map[string]any{"name": "shard:1", "owner_id": "w", "ttl_ms": -5}, 400, "invalid_request"},
		{"zero ttl", "POST", "/v1/leases", map[string]any{"name": "shard:1", "owner_id": "w", "ttl_ms": 0}, 400, "invalid_request"},
		{"enormous ttl", "POST", "/v1/leases", map[string]any{"name": "shard:1", "owner_id": "w", "ttl_ms": 1 << 62}, 400, "invalid_request"},
		{"ttl over max", "POST", "/v1/leases", map[string]any{"name": "shard:1", "owner_id": "w", "ttl_ms": 24 * 3600 * 1000}, 400, "invalid_request"},
		{"ttl as string", "POST", "/v1/leases", map[string]any{"name": "shard:1", "owner_id": "w", "ttl_ms": "1000"}, 400, "invalid_request"},
		{"acquire token string", "POST", "/v1/leases", map[string]any{"name": "shard:1", "owner_id": "w", "ttl_ms": 1000, "token": "7"}, 400, "invalid_request"},
		{"renew missing token", "PATCH", "/v1/leases/shard:19", map[string]any{"owner_id": "w1", "ttl_ms": 1000}, 400, "invalid_request"},
		{"release bad token", "DELETE", "/v1/leases/shard:19?owner_id=w1&token=abc", nil, 400, "invalid_request"},
		{"unknown route", "GET", "/v2/leases", nil, 404, "not_found"},
	}
	for _, tc := range cases {
		rep := r.do(t, tc.method, tc.path, tc.body)
		if rep.status != tc.status || rep.code() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, rep.status, rep.raw, tc.status, tc.code)
		}
	}
	log := &ackLog{}
	b.mustProduce(t, r, log, "shard:19", "w1", token, "good", 2)
	recs := b.checkInvariants(t, "shard:19", log)
	if len(recs) != 3 {
		t.Fatalf("partition holds %d records, want barrier + 2 (bad input wrote something)", len(recs))
	}
	if l, err := b.store.Get(b.ctx, "shard:1"); err == nil {
		t.Fatalf("a refused acquire left a lease row: %+v", l)
	}
}

// TestRefusalsNameTheMemberTheTypeAndTheValue: on every route with a
// body or a query, a member of the wrong type, an unknown member and
// broken JSON are 400 invalid_request whose detail names the member as
// sent, the JSON type it must have and the value it held (not a Go field
// name, a Go type or a value cut off).
func TestRefusalsNameTheMemberTheTypeAndTheValue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:23", "w1", 30*time.Second)
	lease, records := "/v1/leases/shard:23", "/v1/leases/shard:23/records"
	cases := []struct {
		name, method, path, body, detail string
	}{
		{"acquire ttl as string", "POST", "/v1/leases", `{"name":"shard:24","owner_id":"w","ttl_ms":"1000"}`,
			`member "ttl_ms" must be an integer, got string "1000"`},
		{"acquire unknown member", "POST", "/v1/leases", `{"name":"shard:24","owner_id":"w","ttl_ms":1000,"partition":2}`,
			`unknown member "partition"; the members here are name, owner_id, ttl_ms, token`},
		{"regenerate token as string", "POST", "/v1/leases", fmt.Sprintf(`{"name":"shard:23","owner_id":"w1","ttl_ms":1000,"token":"%d"}`, token),
			fmt.Sprintf(`member "token" must be an integer, got string "%d"`, token)},
		{"renew token as string", "PATCH", lease, `{"token":"5"}`, `member "token" must be an integer, got string "5"`},
		{"renew broken JSON", "PATCH", lease, `{"owner_id":"w1",`, `malformed JSON: the body ends after 17 bytes, before its value is complete`},
		{"produce owner as number", "POST", records, `{"owner_id":17,"token":1,"batch_id":"b","records":[]}`,
			`member "owner_id" must be a string, got number 17`},
		{"produce value as string", "POST", records, `{"owner_id":"w1","token":1,"batch_id":"b","records":[{"value":"v"}]}`,
			`member "records[0].value" must be an object, got string "v"`},
		{"release token not a number", "DELETE", lease + "?owner_id=w1&token=abc", "",
			`query parameter "token" must be a positive integer, got "abc"`},
	}
	for _, tc := range cases {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		rep := r.do(t, tc.method, tc.path, body)
		if rep.status != http.StatusBadRequest || rep.code() != "invalid_request" || rep.body["detail"] != tc.detail {
			t.Errorf("%s: %d %s, want 400 invalid_request %q", tc.name, rep.status, rep.raw, tc.detail)
		}
	}
}

// TestWrongMethodIs405WithAllow: a method the server does not serve on a
// path it serves is 405 method_not_allowed with an Allow header listing
// the methods it does serve there (after authentication, as every /v1
// answer); a path it does not serve stays 404 not_found.
func TestWrongMethodIs405WithAllow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	for _, tc := range []struct {
		method, path, allow string
	}{
		{"PUT", "/v1/leases/shard:1", "DELETE, GET, PATCH"},
		{"POST", "/v1/leases/shard:1", "DELETE, GET, PATCH"},
		{"DELETE", "/v1/leases", "GET, POST"},
		{"GET", "/v1/leases/shard:1/records", "POST"},
		{"POST", "/healthz", "GET"},
		{"HEAD", "/readyz", "GET"},
	} {
		rep := r.do(t, tc.method, tc.path, nil)
		if rep.status != http.StatusMethodNotAllowed || (tc.method != "HEAD" && rep.code() != "method_not_allowed") {
			t.Errorf("%s %s: %d %s, want 405 method_not_allowed", tc.method, tc.path, rep.status, rep.raw)
		}
		if got := rep.header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
		if ct := rep.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s %s: content type %q", tc.method, tc.path, ct)
		}
	}
	for _, path := range []string{"/v1/nothing", "/v1/leases/shard:1/other", "/v2/leases"} {
		if rep := r.do(t, "PUT", path, nil); rep.status != http.StatusNotFound || rep.code() != "not_found" || rep.header.Get("Allow") != "" {
			t.Errorf("PUT %s: %d %s (Allow %q), want 404 not_found", path, rep.status, rep.raw, rep.header.Get("Allow"))
		}
	}
	if rep := r.doAs(t, "", "PUT", "/v1/leases/shard:1", nil); rep.status != http.StatusUnauthorized {
		t.Errorf("PUT without credentials: %d %s, want 401", rep.status, rep.raw)
	}
}
