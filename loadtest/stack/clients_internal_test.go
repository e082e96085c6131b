package stack

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/gateway"
)

// TestChildConfigRegistersEveryClient: the config file a gateway child is
// started with (--config) registers every client of WithClients, each
// under its own name with the hash of its own token and the same allow
// pattern, and the child gets the stack's in-flight caps.
func TestChildConfigRegistersEveryClient(t *testing.T) {
	t.Parallel()
	s, err := newStack([]StackOption{WithClients(3), WithLimits(gateway.ServerConfig{MaxInFlightPerClient: 7})})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cfg, err := writeChildConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	fc, _, err := fileconfig.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens := s.WorkerTokens()
	if len(fc.Clients) != 3 || len(tokens) != 3 {
		t.Fatalf("%d clients in the file, %d tokens; want 3 and 3", len(fc.Clients), len(tokens))
	}
	names := map[string]bool{}
	for i, c := range fc.Clients {
		names[c.Name] = true
		if c.TokenSHA256 != gateway.HashToken(tokens[i]) || !slices.Equal(c.Allow, []string{"shard:*"}) {
			t.Errorf("client %d %+v: want the hash of token %q and allow shard:*", i, c, tokens[i])
		}
	}
	if len(names) != 3 || tokens[0] == tokens[1] || tokens[1] == tokens[2] || tokens[0] == tokens[2] {
		t.Fatalf("names %v, tokens %v: want three distinct of each", names, tokens)
	}
	if fc.Clients[0].Name != "loadtest" || tokens[0] != WorkerToken {
		t.Errorf("the first client is %q with token %q; want the default client", fc.Clients[0].Name, tokens[0])
	}
	c, err := newChildGateway(s, "fencegate", cfg, "r0", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(c.args, " ")
	total := fmt.Sprintf("--max-inflight %d", gateway.DefaultServerConfig().MaxInFlight)
	for _, want := range []string{"--config " + cfg, total, "--max-inflight-per-client 7"} {
		if !strings.Contains(argv, want) {
			t.Errorf("the child's argv lacks %q: %s", want, argv)
		}
	}
	if _, err := newStack([]StackOption{WithClients(0)}); err == nil {
		t.Error("WithClients(0) accepted")
	}
}
