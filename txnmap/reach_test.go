package txnmap_test

import (
	"testing"

	"github.com/fencegate/fencegate/txnmap"
)

// reachRouter routes orders-eu-* first, then orders-*, then the rest.
func reachRouter(t testing.TB) *txnmap.Router {
	t.Helper()
	r, err := txnmap.NewRouter("test", []txnmap.Route{
		{Pattern: "orders-eu-*", Topic: "eu", Partitions: 4},
		{Pattern: "orders-*", Topic: "orders", Partitions: 8},
		{Pattern: "*", Topic: "rest", Partitions: 2, Rule: txnmap.RuleMurmur2},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReaches: an allow pattern reaches a route when some lease name it
// allows is routed there; a name a route listed first takes is not
// reached through the later one.
func TestReaches(t *testing.T) {
	t.Parallel()
	r := reachRouter(t)
	cases := []struct {
		allow, pattern string
		want           bool
	}{
		{"orders-*", "orders-*", true},
		{"orders-1", "orders-*", true},
		{"*-7", "orders-*", true},
		{"*", "orders-*", true},
		{"o?ders-[0-9]", "orders-*", true},
		{`orders-\1`, "orders-*", true},
		{"orders-eu-*", "orders-*", false}, // every such name is orders-eu-*'s
		{"orders-eu-1", "orders-*", false},
		{"orders-eu*", "orders-*", true}, // orders-eu1 is orders-*'s
		{"orders-eu-*", "orders-eu-*", true},
		{"invoices-*", "orders-*", false},
		{"orders", "orders-*", false},
		{"orders-[", "orders-*", false}, // malformed: matches nothing
		{"orders-a/b", "orders-*", false},
		{"orders-*", "*", false},
		{"invoices-*", "*", true},
		{"*", "*", true},
	}
	for _, c := range cases {
		if got := r.Reaches(c.allow, c.pattern); got != c.want {
			t.Errorf("Reaches(%q, %q) = %v, want %v", c.allow, c.pattern, got, c.want)
		}
	}
}

// FuzzReachesCoversEveryRoutedName: a valid name that allow matches and
// the router sends to a route is reached: Reaches never says no where a
// client could acquire a lease of the route.
func FuzzReachesCoversEveryRoutedName(f *testing.F) {
	for _, s := range [][2]string{{"orders-1", "orders-1"}, {"*-7", "orders-eu-7"}, {"*-7", "x-7"}, {"o*[0-4]", "orders-3"}} {
		f.Add(s[0], s[1])
	}
	r := reachRouter(f)
	f.Fuzz(func(t *testing.T, allow, name string) {
		if txnmap.ValidateName(name) != nil || !txnmap.Match(allow, name) {
			return
		}
		pattern, ok := r.PatternOf(name)
		if ok && !r.Reaches(allow, pattern) {
			t.Fatalf("%q allows %q, routed to %q, but Reaches(%q, %q) is false", allow, name, pattern, allow, pattern)
		}
	})
}
