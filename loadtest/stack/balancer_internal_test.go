package stack

import (
	"strings"
	"testing"
)

// TestHAProxyConfigNeverResendsASentRequest: the balancer retries a
// request on another replica only when the connection failed (nothing
// was sent), health-checks /readyz, lists every replica by its name, and
// lets no replica out of rotation keep requests (FM52).
func TestHAProxyConfigNeverResendsASentRequest(t *testing.T) {
	cfg := haproxyConfig("127.0.0.1:1", "/tmp/s", map[string]string{"r0": "127.0.0.1:2", "r1": "127.0.0.1:3"}, []string{"r0", "r1"})
	for _, want := range []string{"mode http", "balance roundrobin", "option httpchk GET /readyz", "retry-on conn-failure\n",
		"option redispatch", "server r0 127.0.0.1:2 check", "server r1 127.0.0.1:3 check",
		"on-marked-down shutdown-sessions", "set-timeout server 1000ms if { method PATCH }"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("haproxy.cfg lacks %q:\n%s", want, cfg)
		}
	}
	if n := strings.Count(cfg, "retry-on"); n != 1 {
		t.Errorf("%d retry-on lines, want the one of conn-failure", n)
	}
}
