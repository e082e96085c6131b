package client

import (
	"errors"
	"testing"
)

// TestHolderPolicy: what the default and configured HolderHosts allow.
func TestHolderPolicy(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, base string
		hosts      []string
		holder     string
		allowed    bool
	}{
		{"same host other port", "https://gw.prod.example.com", nil, "https://gw.prod.example.com:9443", true},
		{"sibling under the parent domain", "https://fencegate.prod.example.com", nil, "https://gw-1.prod.example.com:8080", true},
		{"deeper under the parent domain", "https://fencegate.prod.example.com", nil, "https://a.b.prod.example.com", true},
		{"the parent domain's parent", "https://fencegate.prod.example.com", nil, "https://other.example.com", false},
		{"a look-alike suffix", "https://fencegate.prod.example.com", nil, "https://evilprod.example.com", false},
		{"https to http", "https://gw.prod.example.com", nil, "http://gw.prod.example.com", false},
		{"http to https", "http://gw.prod.example.com", nil, "https://gw.prod.example.com", false},
		{"two-label host: itself only", "https://example.com", nil, "https://gw.example.com", false},
		{"one-label host: itself only", "http://fencegate-gateway:8080", nil, "http://10.1.2.3:8080", false},
		{"IP literal: the same IP", "http://127.0.0.1:8080", nil, "http://127.0.0.1:8082", true},
		{"IP literal: another IP", "http://127.0.0.1:8080", nil, "http://127.0.0.2:8080", false},
		{"IPv6 literal", "http://[::1]:8080", nil, "http://[::1]:9", true},
		{"CIDR entry", "http://fencegate-gateway:8080", []string{"10.0.0.0/8"}, "http://10.1.2.3:8080", true},
		{"CIDR entry, outside", "http://fencegate-gateway:8080", []string{"10.0.0.0/8"}, "http://192.168.1.1:8080", false},
		{"listed host", "http://127.0.0.1:8080", []string{"localhost"}, "http://LOCALHOST.:8080", true},
		{"listed domain", "https://lb.example.net", []string{".gw.example.internal"}, "https://g1.gw.example.internal", true},
		{"a list replaces the default", "https://fencegate.prod.example.com", []string{"10.0.0.1"}, "https://gw-1.prod.example.com", false},
		{"the base host stays allowed", "https://fencegate.prod.example.com", []string{"10.0.0.1"}, "https://fencegate.prod.example.com:1", true},
		{"user information", "https://gw.prod.example.com", nil, "https://u:p@gw.prod.example.com", false},
		{"not a URL", "https://gw.prod.example.com", nil, "gw.prod.example.com", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := newHolderPolicy(c.base, c.hosts)
			if err != nil {
				t.Fatal(err)
			}
			err = p.allow(c.holder)
			if (err == nil) != c.allowed || (err != nil && !errors.Is(err, ErrHolderNotAllowed)) {
				t.Errorf("%s -> %s with %v: %v, want allowed %v", c.base, c.holder, c.hosts, err, c.allowed)
			}
		})
	}
	for _, bad := range []string{".com", "*.example.com", "a/b", "10.0.0.0/33"} {
		if _, err := newHolderPolicy("https://x.example.com", []string{bad}); err == nil {
			t.Errorf("HolderHosts entry %q accepted", bad)
		}
	}
	if _, err := newHolderPolicy("gw:8080", nil); err == nil {
		t.Error("a BaseURL without a scheme accepted")
	}
}
