package rollout_test

import (
	"slices"
	"testing"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/rollout"
	"github.com/fencegate/fencegate/txnmap"
)

// TestFM87_ACLPlanListsEveryDirectClientThatReachesTheRoute: enforce's
// ACL plan for route orders-* lists every direct client that can acquire
// any lease of the route, also those whose allow patterns reach only part
// of it (orders-1, orders-eu-*, *-7); it leaves out fenced clients,
// clients of other routes, and a direct client whose every allowed name
// is taken by a route listed first. Judged by glob prefix, the plan was
// only the client allowed orders-*, and the others kept Write on the
// topic after enforcement.
func TestFM87_ACLPlanListsEveryDirectClientThatReachesTheRoute(t *testing.T) {
	t.Parallel()
	direct := func(name string, allow ...string) fileconfig.Client {
		return fileconfig.Client{Name: name, Kind: fileconfig.KindDirect, KafkaPrincipal: "User:" + name, Allow: allow}
	}
	clients := []fileconfig.Client{
		direct("all", "orders-*"),
		direct("one", "orders-1"),
		direct("eu", "orders-eu-*"),
		direct("seven", "*-7"),
		direct("invoices", "invoices-*"),
		direct("fr", "orders-fr-*"), // every name routed to orders-fr-* first
		{Name: "fenced", Kind: fileconfig.KindFenced, Allow: []string{"orders-*"}},
	}
	router, err := txnmap.NewRouter("test", []txnmap.Route{
		{Pattern: "orders-fr-*", Topic: "orders-fr", Partitions: 1},
		{Pattern: "orders-*", Topic: "orders", Partitions: 8},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &rollout.Rollouts{Router: router}
	var got []string
	for _, c := range r.ACLPlan(clients, router.Routes()[1]) {
		if c.Topic != "orders" || c.Operation != "Write" || c.Principal != "User:"+c.Client {
			t.Errorf("change %+v: want Write on orders for the client's principal", c)
		}
		got = append(got, c.Client)
	}
	if want := []string{"all", "one", "eu", "seven"}; !slices.Equal(got, want) {
		t.Fatalf("ACL plan for orders-* lists %v, want %v", got, want)
	}
}
