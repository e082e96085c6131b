package gateway_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/gateway"
)

// TestClientIdentities: a client needs a token hash or a certificate
// name, and a certificate name names one client only.
func TestClientIdentities(t *testing.T) {
	t.Parallel()
	h := gateway.HashToken("t")
	for _, c := range []struct {
		name    string
		clients []fileconfig.Client
		want    string
	}{
		{"token", []fileconfig.Client{{Name: "a", TokenSHA256: h}}, ""},
		{"certificate only", []fileconfig.Client{{Name: "a", CertificateCN: "a.example"}}, ""},
		{"both", []fileconfig.Client{{Name: "a", TokenSHA256: h, CertificateCN: "a.example"}}, ""},
		{"neither", []fileconfig.Client{{Name: "a"}}, "64 hex digits"},
		{"bad hash with a certificate", []fileconfig.Client{{Name: "a", TokenSHA256: "zz", CertificateCN: "a.example"}}, "64 hex digits"},
		{"shared certificate name", []fileconfig.Client{{Name: "a", CertificateCN: "x"}, {Name: "b", CertificateCN: "x"}}, "names another client"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := gateway.NewAuthenticator(c.clients)
			if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

// TestFM44_AmbiguousConfigRefused: a config whose clients could be read
// two ways does not load. A token hash shared by two clients resolved to
// the last one (a narrow client next to an admin gave the narrow token
// admin rights); two clients of one name shared one in-flight cap and
// one owner binding; a malformed allow pattern loaded and matched
// nothing. Each is refused at load with the client and the cause named.
func TestFM44_AmbiguousConfigRefused(t *testing.T) {
	t.Parallel()
	route := "routes:\n  - {pattern: \"shard:*\", topic: out, partitions: 4}\nclients:\n"
	narrow, admin := gateway.HashToken("narrow-token"), gateway.HashToken("admin-token")
	for _, c := range []struct {
		name, clients, want string
	}{
		{"distinct clients", "  - {name: narrow, token_sha256: " + narrow + ", allow: [\"shard:1*\"]}\n" +
			"  - {name: admin, token_sha256: " + admin + ", allow: [\"*\"], act_for: [\"*\"]}\n", ""},
		{"shared token hash", "  - {name: narrow, token_sha256: " + narrow + ", allow: [\"shard:1*\"]}\n" +
			"  - {name: admin, token_sha256: " + narrow + ", allow: [\"*\"]}\n", `client "admin": token_sha256 is client "narrow"'s too`},
		{"shared token hash, other case", "  - {name: narrow, token_sha256: " + narrow + ", allow: [\"shard:1*\"]}\n" +
			"  - {name: admin, token_sha256: " + strings.ToUpper(narrow) + ", allow: [\"*\"]}\n", `token_sha256 is client "narrow"'s too`},
		{"duplicate name", "  - {name: w, token_sha256: " + narrow + ", allow: [\"shard:1*\"]}\n" +
			"  - {name: w, token_sha256: " + admin + ", allow: [\"shard:2*\"]}\n", `client "w" is named twice`},
		{"duplicate name, certificate only", "  - {name: w, certificate_cn: a.example, allow: [\"shard:1*\"]}\n" +
			"  - {name: w, certificate_cn: b.example, allow: [\"shard:2*\"]}\n", `client "w" is named twice`},
		{"malformed allow pattern", "  - {name: w, token_sha256: " + narrow + ", allow: [\"shard:[1-\"]}\n", `client "w": allow pattern "shard:[1-"`},
		{"unterminated escape", "  - {name: w, token_sha256: " + narrow + ", allow: [\"shard:\\\\\"]}\n", `allow pattern`},
		{"empty allow pattern", "  - {name: w, token_sha256: " + narrow + ", allow: [\"\"]}\n", `allow pattern ""`},
		{"act_for names no client", "  - {name: w, token_sha256: " + narrow + ", allow: [\"*\"], act_for: [\"nobody\"]}\n", `act_for names "nobody"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			fc, _, err := fileconfig.Parse([]byte(route + c.clients))
			if err == nil {
				_, err = gateway.NewAuthenticator(fc.Clients)
			}
			if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}
