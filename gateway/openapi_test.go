package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/gateway"
)

// openapiPath is the wire-format contract, relative to this package.
const openapiPath = "../api/openapi.yaml"

// loadContract loads and validates api/openapi.yaml.
func loadContract(t testing.TB) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile(openapiPath)
	if err != nil {
		t.Fatalf("load %s: %v", openapiPath, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", openapiPath, err)
	}
	return doc
}

// contract validates real exchanges with running replicas against the
// document: the request (so the test speaks the documented API), the
// status (it must be documented for the operation) and the reply (headers
// and body against the status's schema).
type contract struct {
	router routers.Router
}

func newContract(t testing.TB, replicas ...*replica) *contract {
	t.Helper()
	doc := loadContract(t)
	// The routes are the document's; the servers are this test's replicas.
	doc.Servers = nil
	for _, r := range replicas {
		doc.Servers = append(doc.Servers, &openapi3.Server{URL: r.srv.URL})
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &contract{router: router}
}

// exchange is one request sent to a replica and its reply.
type exchange struct {
	status int
	body   map[string]any
	raw    []byte
}

func (x exchange) code() string { s, _ := x.body["code"].(string); return s }

// call sends method path with body (JSON-encoded unless []byte) to r as
// the client with bearer token, and validates request and reply against
// the document. badRequest skips the request's validation, for requests
// that break the contract on purpose.
func (c *contract) call(t testing.TB, r *replica, bearer, method, path string, body any, badRequest bool) exchange {
	t.Helper()
	var raw []byte
	switch v := body.(type) {
	case nil:
	case []byte:
		raw = v
	default:
		var err error
		if raw, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	newReq := func() *http.Request {
		var rd io.Reader
		if raw != nil {
			rd = bytes.NewReader(raw)
		}
		req, err := http.NewRequest(method, r.srv.URL+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if raw != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		return req
	}
	resp, err := http.DefaultClient.Do(newReq())
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	x := exchange{status: resp.StatusCode, raw: got}
	dec := json.NewDecoder(bytes.NewReader(got))
	dec.UseNumber()
	_ = dec.Decode(&x.body)

	vreq := newReq()
	route, params, err := c.router.FindRoute(vreq)
	if err != nil {
		t.Fatalf("%s %s: no operation in %s: %v", method, path, openapiPath, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	if !badRequest {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			t.Errorf("%s %s: the test's request breaks %s: %v", method, path, openapiPath, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
		Header: resp.Header, Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	out.SetBodyBytes(got)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s %s: reply %d %s breaks %s: %v", method, path, resp.StatusCode, got, openapiPath, err)
	}
	return x
}

// expect fails the test unless x has the status (and, for problems, the
// code) wanted.
func expect(t testing.TB, what string, x exchange, status int, code string) {
	t.Helper()
	if x.status != status || x.code() != code {
		t.Fatalf("%s: %d %s, want %d %q", what, x.status, x.raw, status, code)
	}
}

// TestOpenAPIRepliesMatchTheDocument runs real replicas (real Postgres,
// the embedded broker) through a worker's life and an operator's look,
// plus a problem answer of every 4xx status the lease and produce routes
// send, and validates every request and reply against api/openapi.yaml.
func TestOpenAPIRepliesMatchTheDocument(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newReplica(func(c *gateway.Config) { c.Limits.MaxRecords = 4 })
	other := b.newReplica(nil)
	c := newContract(t, a, other)
	const lease, owner = "shard:8841", "indexer-17"
	do := func(method, path string, body any) exchange {
		t.Helper()
		return c.call(t, a, devToken, method, path, body, false)
	}

	// A worker's life: acquire, produce, renew, release.
	x := do("POST", "/v1/leases", map[string]any{"name": lease, "owner_id": owner, "ttl_ms": 30000})
	expect(t, "acquire", x, http.StatusCreated, "")
	n, _ := x.body["token"].(json.Number)
	tok, err := n.Int64()
	if err != nil || tok <= 0 {
		t.Fatalf("acquire token %v: %v", x.body["token"], err)
	}
	batch := batchBody(owner, tok, "b-1", 3)
	batch["records"] = append(batch["records"].([]map[string]any),
		map[string]any{"value": map[string]any{"type": "JSON", "data": map[string]any{"n": 1}}}) // key absent
	x = do("POST", "/v1/leases/"+lease+"/records", batch)
	expect(t, "produce", x, http.StatusOK, "")
	if offs, _ := x.body["offsets"].([]any); len(offs) != 4 {
		t.Fatalf("produce offsets %s, want 4", x.raw)
	}
	x = do("PATCH", "/v1/leases/"+lease, map[string]any{"owner_id": owner, "token": tok, "ttl_ms": 30000})
	expect(t, "renew", x, http.StatusOK, "")
	withCheckpoint := batchBody(owner, tok, "b-c", 2)
	withCheckpoint["checkpoint"] = map[string]any{"type": "STRING", "data": "input=17"}
	x = do("POST", "/v1/leases/"+lease+"/records", withCheckpoint)
	expect(t, "produce with a checkpoint", x, http.StatusOK, "")
	if offs, _ := x.body["offsets"].([]any); len(offs) != 2 || x.body["checkpoint_offset"] == nil {
		t.Fatalf("produce with a checkpoint %s: want 2 offsets and checkpoint_offset", x.raw)
	}
	// No materializer runs here: the ledger never applies the barrier.
	cp := fmt.Sprintf("/v1/leases/%s/checkpoint?owner_id=%s&token=%d", lease, owner, tok)
	x = do("GET", cp+"&wait=0s", nil)
	expect(t, "checkpoint read, the ledger behind", x, http.StatusServiceUnavailable, "ledger_behind")
	if x.body["ledger_token"] == nil {
		t.Fatalf("ledger_behind lacks ledger_token: %s", x.raw)
	}
	x = do("GET", cp+"&wait=31s", nil)
	expect(t, "checkpoint read waiting too long", x, http.StatusBadRequest, "invalid_request")
	x = do("GET", fmt.Sprintf("/v1/leases/%s/checkpoint?owner_id=%s&token=%d", lease, owner, tok+1), nil)
	expect(t, "checkpoint read with another token", x, http.StatusConflict, "lease_lost")

	// The operator's look.
	x = do("GET", "/v1/leases/"+lease, nil)
	expect(t, "get", x, http.StatusOK, "")
	if evs, _ := x.body["events"].([]any); len(evs) < 2 {
		t.Fatalf("lease view %s: want its acquired and activated events (renewals write none)", x.raw)
	}
	x = do("GET", "/v1/leases?prefix=shard:", nil)
	expect(t, "list", x, http.StatusOK, "")
	expect(t, "acquire a second lease", do("POST", "/v1/leases", map[string]any{"name": lease + "0", "owner_id": owner, "ttl_ms": 30000}),
		http.StatusCreated, "")
	x = do("GET", "/v1/leases?limit=1", nil)
	expect(t, "list a page", x, http.StatusOK, "")
	if x.body["next"] == nil {
		t.Fatalf("a page of 1 of the leases %s: want next", x.raw)
	}
	x = do("GET", "/v1/leases?prefix=%ff", nil)
	expect(t, "list under a prefix that is not UTF-8", x, http.StatusBadRequest, "invalid_request")
	expect(t, "healthz", c.call(t, a, "", "GET", "/healthz", nil, false), http.StatusOK, "")
	expect(t, "readyz", c.call(t, a, "", "GET", "/readyz", nil, false), http.StatusOK, "")

	// Problems, one of each 4xx status (and the members they carry).
	x = do("POST", "/v1/leases", map[string]any{"name": lease, "owner_id": "indexer-04", "ttl_ms": 30000})
	expect(t, "acquire of a held lease", x, http.StatusConflict, "lease_held")
	if x.body["holder_owner_id"] != owner || x.body["expires_at"] == nil {
		t.Fatalf("lease_held lacks holder_owner_id or expires_at: %s", x.raw)
	}
	x = do("POST", "/v1/leases", map[string]any{"name": lease, "owner_id": "indexer-04", "ttl_ms": 30000, "token": tok})
	expect(t, "new generation by another owner", x, http.StatusConflict, "lease_lost")
	x = do("POST", "/v1/leases/"+lease+"/records", batchBody("indexer-04", tok, "b-2", 1))
	expect(t, "produce by an owner that is not the session's", x, http.StatusConflict, "lease_lost")
	x = do("POST", "/v1/leases/"+lease+"/records", batchBody(owner, tok+1000, "b-2", 1))
	expect(t, "produce with a later token than the session's", x, http.StatusConflict, "not_holder")
	x = c.call(t, other, devToken, "POST", "/v1/leases/"+lease+"/records", batchBody(owner, tok, "b-2", 1), false)
	expect(t, "produce at the replica without the session", x, http.StatusMisdirectedRequest, "misdirected")
	if x.body["holder_url"] != a.srv.URL || x.body["holder"] != a.name {
		t.Fatalf("misdirected names holder %v at %v, want %s at %s", x.body["holder"], x.body["holder_url"], a.name, a.srv.URL)
	}
	x = c.call(t, other, devToken, "PATCH", "/v1/leases/"+lease, map[string]any{"owner_id": owner, "token": tok, "ttl_ms": 30000}, false)
	expect(t, "renew at the replica without the session", x, http.StatusMisdirectedRequest, "misdirected")
	x = do("POST", "/v1/leases/"+lease+"/records", batchBody(owner, tok, "b-3", 5))
	expect(t, "a batch over the record limit", x, http.StatusRequestEntityTooLarge, "payload_too_large")
	x = c.call(t, a, devToken, "POST", "/v1/leases", []byte(`{"name":"shard:1","owner_id":"w","ttl_ms":"1000"}`), true)
	expect(t, "ttl_ms as a string", x, http.StatusBadRequest, "invalid_request")
	x = c.call(t, a, devToken, "POST", "/v1/leases/"+lease+"/records", []byte(`{"owner_id":"w","token":1,"batch_id":"b","records":[{"headers":{"Fencegate-Token":"9"}}]}`), true)
	expect(t, "a reserved header", x, http.StatusBadRequest, "invalid_request")
	x = c.call(t, a, "", "GET", "/v1/leases/"+lease, nil, true)
	expect(t, "no credentials", x, http.StatusUnauthorized, "unauthorized")
	x = c.call(t, a, "narrow-token", "POST", "/v1/leases", map[string]any{"name": "shard:2", "owner_id": "w", "ttl_ms": 1000}, false)
	expect(t, "a lease outside the client's patterns", x, http.StatusForbidden, "forbidden")
	x = do("GET", "/v1/leases/shard:404", nil)
	expect(t, "a lease never granted", x, http.StatusNotFound, "not_found")

	// Release at the holder: 204; afterwards the token is refused.
	x = do("DELETE", "/v1/leases/"+lease+"?owner_id="+owner+"&token="+strconv.FormatInt(tok, 10), nil)
	expect(t, "release", x, http.StatusNoContent, "")
	x = do("DELETE", "/v1/leases/"+lease+"?owner_id="+owner+"&token="+strconv.FormatInt(tok, 10), nil)
	if x.status != http.StatusConflict {
		t.Fatalf("second release: %d %s, want 409", x.status, x.raw)
	}
	x = do("POST", "/v1/leases/"+lease+"/records", batchBody(owner, tok, "b-4", 1))
	if x.status != http.StatusConflict || x.code() == "generation_ended" {
		t.Fatalf("produce after release: %d %s, want a definite 409", x.status, x.raw)
	}
}

// codeConstants returns the values of the Code constants declared in
// errors.go: the server's list of problem codes.
func codeConstants(t testing.TB) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("a Code constant is not a string literal: %#v", v)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				codes = append(codes, s)
			}
		}
	}
	if len(codes) == 0 {
		t.Fatal("no Code constants found in errors.go")
	}
	return codes
}

// TestOpenAPICodesMatchTheServer: every Code constant of the gateway is in
// the document's code enum and in the answer table of docs/api.md, and the
// enum holds no code the server does not have.
func TestOpenAPICodesMatchTheServer(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	ref := doc.Components.Schemas["Code"]
	if ref == nil || ref.Value == nil {
		t.Fatal("the document has no Code schema")
	}
	var enum []string
	for _, v := range ref.Value.Enum {
		s, ok := v.(string)
		if !ok {
			t.Fatalf("Code enum value %v is not a string", v)
		}
		enum = append(enum, s)
	}
	codes := codeConstants(t)
	for _, c := range codes {
		if !slices.Contains(enum, c) {
			t.Errorf("code %q of gateway/errors.go is missing from the Code enum of %s", c, openapiPath)
		}
	}
	for _, c := range enum {
		if !slices.Contains(codes, c) {
			t.Errorf("code %q of %s is not a Code of gateway/errors.go", c, openapiPath)
		}
	}
	problem := doc.Components.Schemas["Problem"]
	if problem == nil || problem.Value.Properties["code"] == nil || problem.Value.Properties["code"].Ref != "#/components/schemas/Code" {
		t.Errorf("the Problem schema's code is not the Code schema")
	}
	apiDoc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range codes {
		if !strings.Contains(string(apiDoc), "`"+c+"`") {
			t.Errorf("code %q is not in docs/api.md", c)
		}
	}
}

// sdkCodeConstants returns the SDK's list of problem codes: the string
// constants named Code* of client/errors.go (the SDK is its own module and
// cannot import the gateway's).
func sdkCodeConstants(t testing.TB) []string {
	t.Helper()
	const path = "../client/errors.go"
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Code") {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s: %s is not a string literal", path, name.Name)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				codes = append(codes, s)
			}
		}
	}
	if len(codes) == 0 {
		t.Fatalf("no Code constants found in %s", path)
	}
	return codes
}

// TestSDKCodesMatchTheServer ties the third copy of the code list: the Go
// SDK's Code constants are exactly the gateway's Code constants and the
// document's Code enum, and the SDK's Problem has a field for every member
// of the document's Problem schema (and none it lacks).
func TestSDKCodesMatchTheServer(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	server := codeConstants(t)
	sdk := sdkCodeConstants(t)
	var enum []string
	for _, v := range doc.Components.Schemas["Code"].Value.Enum {
		enum = append(enum, v.(string))
	}
	for _, lists := range []struct {
		name string
		list []string
	}{{"gateway/errors.go", server}, {openapiPath + " (Code enum)", enum}} {
		for _, c := range lists.list {
			if !slices.Contains(sdk, c) {
				t.Errorf("code %q of %s is missing from the SDK (client/errors.go)", c, lists.name)
			}
		}
		for _, c := range sdk {
			if !slices.Contains(lists.list, c) {
				t.Errorf("code %q of the SDK (client/errors.go) is not in %s", c, lists.name)
			}
		}
	}
	if len(sdk) != len(slices.Compact(slices.Sorted(slices.Values(sdk)))) {
		t.Errorf("the SDK lists a code twice: %v", sdk)
	}

	fields := jsonNames(reflect.TypeFor[client.Problem]())
	var members []string
	for name := range doc.Components.Schemas["Problem"].Value.Properties {
		members = append(members, name)
	}
	slices.Sort(members)
	if !slices.Equal(fields, members) {
		t.Errorf("client.Problem's JSON fields %v differ from the members of the document's Problem schema %v", fields, members)
	}
	// The gateway's own members, after RFC 9457's five.
	served := slices.Sorted(slices.Values(append(jsonNames(reflect.TypeFor[gateway.Members]()),
		"type", "title", "status", "detail", "code")))
	if !slices.Equal(served, members) {
		t.Errorf("the members the gateway sends %v differ from the members of the document's Problem schema %v", served, members)
	}
}

// jsonNames are the JSON member names of struct type t's fields, sorted.
func jsonNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return slices.Sorted(slices.Values(names))
}
