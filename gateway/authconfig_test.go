package gateway_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/gateway"
)

// TestClientIdentities: a client needs a token hash or a certificate
// name, and a certificate name names one client only.
func TestClientIdentities(t *testing.T) {
	t.Parallel()
	h := gateway.HashToken("t")
	for _, c := range []struct {
		name    string
		clients []gateway.Client
		want    string
	}{
		{"token", []gateway.Client{{Name: "a", TokenSHA256: h}}, ""},
		{"certificate only", []gateway.Client{{Name: "a", CertificateCN: "a.example"}}, ""},
		{"both", []gateway.Client{{Name: "a", TokenSHA256: h, CertificateCN: "a.example"}}, ""},
		{"neither", []gateway.Client{{Name: "a"}}, "64 hex digits"},
		{"bad hash with a certificate", []gateway.Client{{Name: "a", TokenSHA256: "zz", CertificateCN: "a.example"}}, "64 hex digits"},
		{"shared certificate name", []gateway.Client{{Name: "a", CertificateCN: "x"}, {Name: "b", CertificateCN: "x"}}, "names another client"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := gateway.NewAuthenticator(c.clients)
			if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}
