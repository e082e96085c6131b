package txnmap_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/txnmap"
)

func TestValidateName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		input string
		ok    bool
	}{
		{"shard", "shard:8841", true},
		{"all classes", "Idx_1.a-b:c", true},
		{"max length", strings.Repeat("a", txnmap.MaxNameLen), true},
		{"empty", "", false},
		{"too long", strings.Repeat("a", txnmap.MaxNameLen+1), false},
		{"slash", "a/b", false},
		{"space", "a b", false},
		{"star", "shard:*", false},
		{"unicode", "shärd", false},
		{"invalid utf8", "a\xff", false},
		{"nul", "a\x00", false},
	}
	for _, tc := range cases {
		err := txnmap.ValidateName(tc.input)
		if (err == nil) != tc.ok {
			t.Errorf("%s: ValidateName(%q) = %v, want ok=%t", tc.name, tc.input, err, tc.ok)
		}
		if err != nil && !errors.Is(err, txnmap.ErrInvalidName) {
			t.Errorf("%s: error %v does not wrap ErrInvalidName", tc.name, err)
		}
	}
}

func TestTransactionalIDShape(t *testing.T) {
	t.Parallel()
	id, err := txnmap.TransactionalID("prod-eu1", "shard:8841")
	if err != nil || id != "fencegate/prod-eu1/shard:8841" {
		t.Fatalf("TransactionalID = %q, %v", id, err)
	}
	if !strings.HasPrefix(id, txnmap.IDPrefix("prod-eu1")) {
		t.Fatalf("%q lacks the ACL prefix %q", id, txnmap.IDPrefix("prod-eu1"))
	}
	if _, err := txnmap.LeaseName("prod-eu2", id); err == nil {
		t.Fatal("an id of another prefix decoded")
	}
	if _, err := txnmap.TransactionalID("a/b", "x"); err == nil {
		t.Fatal("a prefix with '/' was accepted")
	}
}

func TestMurmur2MatchesKafka(t *testing.T) {
	t.Parallel()
	// Values from Apache Kafka's Utils.murmur2 tests.
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range cases {
		if got := txnmap.Murmur2([]byte(in)); got != want {
			t.Errorf("Murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestRouterResolve(t *testing.T) {
	t.Parallel()
	r, err := txnmap.NewRouter("dev", []txnmap.Route{
		{Pattern: "shard:*", Topic: "shard-output", Partitions: 16},
		{Pattern: "idx:*", Topic: "index", Partitions: 12, Rule: txnmap.RuleMurmur2},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Resolve("shard:8841")
	if err != nil {
		t.Fatal(err)
	}
	if p.Topic != "shard-output" || p.Partition != 8841%16 || p.TransactionalID != "fencegate/dev/shard:8841" {
		t.Fatalf("placement = %+v", p)
	}
	p, err = r.Resolve("idx:users")
	if err != nil {
		t.Fatal(err)
	}
	want := int32(int64(txnmap.Murmur2([]byte("idx:users"))&0x7fffffff) % 12)
	if p.Topic != "index" || p.Partition != want {
		t.Fatalf("murmur2 placement = %+v, want partition %d", p, want)
	}
	if _, err := r.Resolve("other:1"); !errors.Is(err, txnmap.ErrNoRoute) {
		t.Fatalf("unrouted name: %v", err)
	}
	if _, err := r.Resolve("shard:x"); !errors.Is(err, txnmap.ErrInvalidName) {
		t.Fatalf("number rule on a name without a number: %v", err)
	}
	if _, err := r.Resolve("shard:99999999999999999999999"); err == nil {
		t.Fatal("overflowing shard number accepted")
	}
}

func TestNewRouterRefusesBadRoutes(t *testing.T) {
	t.Parallel()
	bad := []txnmap.Route{
		{Pattern: "", Topic: "t", Partitions: 1},
		{Pattern: "[", Topic: "t", Partitions: 1},
		{Pattern: "a*", Topic: "", Partitions: 1},
		{Pattern: "a*", Topic: "t", Partitions: 0},
		{Pattern: "a*", Topic: "t", Partitions: 1, Rule: "random"},
	}
	for i, rt := range bad {
		if _, err := txnmap.NewRouter("dev", []txnmap.Route{rt}); err == nil {
			t.Errorf("route %d %+v accepted", i, rt)
		}
	}
}

// FuzzFM18_TransactionalIDInjective: decode(encode(x)) == x for valid names,
// two distinct names never share an id, invalid names are refused.
func FuzzFM18_TransactionalIDInjective(f *testing.F) {
	for _, s := range []string{"shard:1", "shard:01", "Shard:1", "a", "a.b", "a_b", "a/b", "", "\xff", "x:y:z"} {
		f.Add(s, "shard:1")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ida, erra := txnmap.TransactionalID("dev", a)
		idb, errb := txnmap.TransactionalID("dev", b)
		if (erra == nil) != (txnmap.ValidateName(a) == nil) {
			t.Fatalf("TransactionalID(%q) err=%v disagrees with ValidateName", a, erra)
		}
		if erra != nil {
			if !errors.Is(erra, txnmap.ErrInvalidName) {
				t.Fatalf("invalid name %q: %v does not wrap ErrInvalidName", a, erra)
			}
			return
		}
		back, err := txnmap.LeaseName("dev", ida)
		if err != nil || back != a {
			t.Fatalf("LeaseName(TransactionalID(%q)) = %q, %v", a, back, err)
		}
		if errb == nil && a != b && ida == idb {
			t.Fatalf("%q and %q share transactional.id %q", a, b, ida)
		}
	})
}

func TestLiteralPrefix(t *testing.T) {
	t.Parallel()
	for pattern, want := range map[string]string{
		"shard:*": "shard:", "shard:1?": "shard:1", "a:[0-9]*": "a:", `a\*b`: "a", "*": "", "exact": "exact", "": "",
		"shard:[1-": "shard:",
	} {
		if got := txnmap.LiteralPrefix(pattern); got != want {
			t.Errorf("LiteralPrefix(%q) = %q, want %q", pattern, got, want)
		}
	}
}

// FuzzFM40_LiteralPrefixAgreesWithMatch: every name Match accepts starts
// with the pattern's literal prefix, so a listing narrowed to that prefix
// and filtered by Match lists exactly what Match alone would.
func FuzzFM40_LiteralPrefixAgreesWithMatch(f *testing.F) {
	for _, s := range [][2]string{{"shard:*", "shard:1"}, {"shard:1?", "shard:12"}, {"a:[0-9]*", "a:7x"},
		{`a\*b`, "a*b"}, {"[a-c]:x", "b:x"}, {"*", "anything"}, {"x[", "x["}, {`\\`, `\`}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if txnmap.Match(pattern, name) && !strings.HasPrefix(name, txnmap.LiteralPrefix(pattern)) {
			t.Fatalf("Match(%q, %q) but the name does not start with LiteralPrefix %q", pattern, name, txnmap.LiteralPrefix(pattern))
		}
	})
}
