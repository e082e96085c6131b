package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/pgtest"
)

// TestRolloutCommands runs `serve` and walks a route through `rollout
// observe`, `gate` and `enforce` as an operator does: status names the
// state, a direct client is granted only under observe, enforce is
// refused (exit 1) while its lease is live and, forced with a reason,
// prints the ACL change; a client without admin is refused the API.
func TestRolloutCommands(t *testing.T) {
	t.Parallel()
	clients := fmt.Sprintf("  - {name: ops, token_sha256: %s, allow: [\"*\"], admin: true}\n"+
		"  - {name: old, token_sha256: %s, allow: [\"shard:*\"], kind: direct, kafka_principal: \"User:old\"}\n",
		gateway.HashToken("dev-token"), gateway.HashToken("old-token"))
	// dev: the rollout command's default token is dev-token (FM45).
	base := "http://" + startServeWith(t, pgtest.NewEmpty(t), gateway.ServerConfig{}, clients, true)
	ctx := context.Background()
	rollout := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, append(append([]string{"rollout"}, args...), "--gateway", base), &out, &errb); code != want {
			t.Fatalf("rollout %v: exit %d, want %d\n%s%s", args, code, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	acquire := func(name string) int {
		req, _ := http.NewRequest("POST", base+"/v1/leases", strings.NewReader(`{"name":"`+name+`","owner_id":"old-1","ttl_ms":60000}`))
		req.Header.Set("Authorization", "Bearer old-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if out := rollout(0, "status"); !strings.Contains(out, "shard:*") || !strings.Contains(out, "enforced") {
		t.Fatalf("status before any step:\n%s", out)
	}
	if st := acquire("shard:1"); st != http.StatusForbidden {
		t.Fatalf("direct acquire with no state: %d, want 403", st)
	}
	if out := rollout(0, "observe", "shard:*", "--reason", "moving"); !strings.Contains(out, `"shard:*" is observe`) {
		t.Fatalf("observe:\n%s", out)
	}
	if st := acquire("shard:1"); st != http.StatusCreated {
		t.Fatalf("direct acquire under observe: %d, want 201", st)
	}
	if out := rollout(0, "gate", "shard:*"); !strings.Contains(out, "1 lease(s) held by direct clients") {
		t.Fatalf("gate:\n%s", out)
	}
	if out := rollout(1, "enforce", "shard:*"); !strings.Contains(out, "refused") {
		t.Fatalf("enforce with a direct lease live:\n%s", out)
	}
	out := rollout(0, "enforce", "shard:*", "--force", "--reason", "test")
	if !strings.Contains(out, "remove: --allow-principal User:old --operation Write --topic shard-output") {
		t.Fatalf("forced enforce lacks the ACL change:\n%s", out)
	}
	var page gateway.RolloutPage
	if err := json.Unmarshal([]byte(rollout(0, "status", "shard:*", "-o", "json")), &page); err != nil ||
		len(page.Rollouts) != 1 || page.Rollouts[0].State != "enforced" || page.Rollouts[0].ChangedBy != "ops" {
		t.Fatalf("status -o json: %+v %v", page, err)
	}
	req, _ := http.NewRequest("GET", base+"/v1/admin/rollouts", nil)
	req.Header.Set("Authorization", "Bearer old-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("admin API for a client without admin: %d, want 403", resp.StatusCode)
	}
}
