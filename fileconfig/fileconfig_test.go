package fileconfig_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fileconfig"
)

// TestParse: the routes are validated and the prefix defaulted here; the
// clients are carried as written, for gateway.NewAuthenticator to judge.
func TestParse(t *testing.T) {
	t.Parallel()
	route := "routes:\n  - {pattern: \"shard:*\", topic: out, partitions: 4}\n"
	for _, c := range []struct {
		name, yaml, prefix, err string
	}{
		{"default prefix", route, fileconfig.DefaultTransactionalIDPrefix, ""},
		{"own prefix", "transactional_id_prefix: dev\n" + route, "dev", ""},
		{"clients not judged", route + "clients:\n  - {name: w, token_sha256: zz}\n", fileconfig.DefaultTransactionalIDPrefix, ""},
		{"no partitions", "routes:\n  - {pattern: \"shard:*\", topic: out}\n", "", "config: "},
		{"not YAML", "routes: [", "", "config: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, router, err := fileconfig.Parse([]byte(c.yaml))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want an error with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.TransactionalIDPrefix != c.prefix || router == nil {
				t.Fatalf("prefix %q router %v, want %q and a router", f.TransactionalIDPrefix, router, c.prefix)
			}
		})
	}
}
