package client_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
)

// TestNewRefusesWhatCouldNeverWork: a Config whose requests could never
// succeed is refused by New with an error naming the field and what is
// wrong, instead of Acquire retrying it until its context ends (forever
// with context.Background()): a BaseURL without a scheme or host or with
// another scheme, a token with "Bearer ", HolderHosts entries that are
// URLs, hooks that would never be called.
func TestNewRefusesWhatCouldNeverWork(t *testing.T) {
	t.Parallel()
	valid := client.Config{BaseURL: "http://127.0.0.1:8080", Token: "t", Owner: "o"}
	cases := []struct {
		name string
		mod  func(*client.Config)
		want string // the whole error text
	}{
		{"no base url", func(c *client.Config) { c.BaseURL = "" }, "fencegate: BaseURL, Token and Owner are required"},
		{"host and port without a scheme", func(c *client.Config) { c.BaseURL = "127.0.0.1:8080" },
			`fencegate: BaseURL "127.0.0.1:8080" has no scheme (write http://127.0.0.1:8080 or https://127.0.0.1:8080)`},
		{"host name and port without a scheme", func(c *client.Config) { c.BaseURL = "fencegate:8080" },
			`fencegate: BaseURL "fencegate:8080" has no scheme (write http://fencegate:8080 or https://fencegate:8080)`},
		{"host alone", func(c *client.Config) { c.BaseURL = "fencegate" },
			`fencegate: BaseURL "fencegate" has no scheme (write http://fencegate or https://fencegate)`},
		{"ftp", func(c *client.Config) { c.BaseURL = "ftp://x" }, `fencegate: BaseURL "ftp://x" has scheme ftp, not http or https`},
		{"no host", func(c *client.Config) { c.BaseURL = "http://:8080" }, `fencegate: BaseURL "http://:8080" has no host`},
		{"empty authority", func(c *client.Config) { c.BaseURL = "https:///v1" }, `fencegate: BaseURL "https:///v1" has no host`},
		{"bad port", func(c *client.Config) { c.BaseURL = "http://gw:port" },
			`fencegate: BaseURL "http://gw:port" does not parse: invalid port ":port" after host`},
		{"user information", func(c *client.Config) { c.BaseURL = "https://u:p@gw" },
			`fencegate: BaseURL "https://u:p@gw" carries user information (the Token authenticates)`},
		{"query", func(c *client.Config) { c.BaseURL = "https://gw?x=1" }, `fencegate: BaseURL "https://gw?x=1" carries a query or a fragment`},
		{"bearer prefix in the token", func(c *client.Config) { c.Token = "Bearer abc" },
			`fencegate: Token must be the bearer token alone: no "Bearer " prefix, spaces or control characters`},
		{"newline in the token", func(c *client.Config) { c.Token = "abc\n" },
			`fencegate: Token must be the bearer token alone: no "Bearer " prefix, spaces or control characters`},
		{"holder host as a URL", func(c *client.Config) { c.HolderHosts = []string{"http://gw1"} },
			`fencegate: HolderHosts entry "http://gw1" is not a host name, a .domain, an IP address or a CIDR prefix`},
		{"holder host with a port", func(c *client.Config) { c.HolderHosts = []string{"gw1:8080"} },
			`fencegate: HolderHosts entry "gw1:8080" is not a host name, a .domain, an IP address or a CIDR prefix`},
		{"holder host empty", func(c *client.Config) { c.HolderHosts = []string{" "} },
			`fencegate: HolderHosts entry "" is not a host name, a .domain, an IP address or a CIDR prefix`},
		{"negative ttl", func(c *client.Config) { c.TTL = -time.Second }, "fencegate: TTL must be at least 1ms"},
		{"renew every past ttl", func(c *client.Config) { c.TTL, c.RenewEvery = time.Second, time.Second },
			"fencegate: RenewEvery must be positive and shorter than TTL"},
		{"backoff bounds", func(c *client.Config) { c.MinBackoff, c.MaxBackoff = time.Second, time.Millisecond },
			"fencegate: MinBackoff must be positive and at most MaxBackoff"},
		{"a hook of no kind", func(c *client.Config) { c.Hooks = []client.Hook{&hookRecorder{}, "not a hook"} },
			"fencegate: Hooks[1] (string) implements none of AcquiredHook, RenewedHook, ProducedHook, LostHook, ReleasedHook"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := valid
			c.mod(&cfg)
			_, err := client.New(cfg)
			if err == nil || err.Error() != c.want {
				t.Fatalf("New: %v\nwant: %s", err, c.want)
			}
		})
	}
	for _, base := range []string{"http://127.0.0.1:8080", "https://fencegate.prod.example.com/", "http://[::1]:8080", "https://lb/fencegate"} {
		cfg := valid
		cfg.BaseURL = base
		if _, err := client.New(cfg); err != nil {
			t.Errorf("New refused BaseURL %q: %v", base, err)
		}
	}
}

// TestAcquireOptionsSetOneLease: WithTTL and WithRenewEvery change one
// lease's TTL (sent as ttl_ms on the grant and every renewal) and renewal
// interval, not the client's; an option that breaks the timing rule is
// refused before anything is sent.
func TestAcquireOptionsSetOneLease(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	c := newClient(t, f, func(c *client.Config) { c.TTL, c.RenewEvery = 20*time.Second, 10*time.Second })
	short, err := c.Acquire(bg, "shard:1", client.WithTTL(time.Second), client.WithRenewEvery(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer short.Release(bg)
	if left := time.Until(short.Deadline()); left > time.Second {
		t.Fatalf("the local deadline is %s away, want at most the lease's 1s TTL", left)
	}
	eventually(t, "renewals every 20ms", func() bool { return len(f.ttl(kRenew)) >= 3 })
	if got := f.ttl(kRenew); slices.ContainsFunc(got, func(ms int64) bool { return ms != 1000 }) {
		t.Fatalf("renewals sent ttl_ms %v, want 1000", got)
	}
	long, err := c.Acquire(bg, "shard:2")
	if err != nil {
		t.Fatal(err)
	}
	defer long.Release(bg)
	if got := f.ttl(kAcquire); !slices.Equal(got, []int64{1000, 20000}) {
		t.Fatalf("grants sent ttl_ms %v, want 1000 (WithTTL) then 20000 (Config.TTL)", got)
	}

	n := len(f.requests())
	for name, opts := range map[string][]client.AcquireOption{
		"renewal as long as the ttl":      {client.WithTTL(time.Second), client.WithRenewEvery(time.Second)},
		"config's renewal past a new ttl": {client.WithRenewEvery(30 * time.Second)},
		"negative ttl":                    {client.WithTTL(-time.Second)},
	} {
		if _, err := c.Acquire(bg, "shard:3", opts...); err == nil || !strings.HasPrefix(err.Error(), "fencegate: ") {
			t.Errorf("%s: Acquire returned %v, want the timing rule's error", name, err)
		}
	}
	if len(f.requests()) != n {
		t.Fatalf("refused options sent requests: %v", f.requests()[n:])
	}
}

// TestWithTTLRenewsAtAThirdOfIt: a lease given WithTTL alone renews at a
// third of its TTL, not at the client's RenewEvery (which may be longer
// than the lease's TTL).
func TestWithTTLRenewsAtAThirdOfIt(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	c := newClient(t, f, func(c *client.Config) { c.TTL, c.RenewEvery = time.Minute, 30*time.Second })
	l, err := c.Acquire(bg, "shard:1", client.WithTTL(90*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	eventually(t, "renewals of the 90ms lease", func() bool { return f.count("renew") >= 3 })
	if !open(l) {
		t.Fatalf("lost: %v", l.Err())
	}
}

// TestContextEndsTheCallNotTheLease: cancelling the context Acquire was
// given does not end the lease: it goes on renewing, Lost stays open, and
// only Release ends it.
func TestContextEndsTheCallNotTheLease(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	c := newClient(t, f, nil)
	ctx, cancel := context.WithCancel(bg)
	l, err := c.Acquire(ctx, "shard:1")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	eventually(t, "renewals after the cancel", func() bool { return f.count("renew") >= 3 })
	if !open(l) {
		t.Fatalf("the lease ended with its acquire's context: %v", l.Err())
	}
	if _, err := l.Produce(bg, "b-1", rec); err != nil {
		t.Fatalf("produce after the cancel: %v", err)
	}
	if err := l.Release(bg); err != nil || !errors.Is(l.Err(), client.ErrReleased) {
		t.Fatalf("release: %v; Err %v", err, l.Err())
	}
}

// TestRenewMovesTheDeadlineNow: Renew renews at once, moving the local
// deadline, and reports a loss as the background renewal would.
func TestRenewMovesTheDeadlineNow(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	c := newClient(t, f, func(c *client.Config) { c.TTL, c.RenewEvery = time.Minute, 30*time.Second })
	l, err := c.Acquire(bg, "shard:1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	before := l.Deadline()
	if err := l.Renew(bg); err != nil {
		t.Fatal(err)
	}
	if !l.Deadline().After(before) || f.count("renew 1") != 1 {
		t.Fatalf("deadline %s after %s; requests %v", l.Deadline(), before, f.requests())
	}
	f.answer(kRenew, "lease_lost_not_owner")
	if err := l.Renew(bg); !errors.Is(err, client.ErrLeaseLost) || open(l) {
		t.Fatalf("Renew answered lease_lost: %v, Lost open %v", err, open(l))
	}
}
