package materializer_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNoGateway holds the boundary of docs/design.md: the ledger
// shares no code with the gateway it defends against, so neither the
// materializer nor the file config it reads its routes from may link
// gateway/, directly or through another package. (The tests may: the
// end-to-end test drives a real gateway.)
func TestImportsNoGateway(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command lists the dependencies: %v", err)
	}
	const gw = "github.com/fencegate/fencegate/gateway"
	for _, pkg := range []string{"github.com/fencegate/fencegate/materializer", "github.com/fencegate/fencegate/fileconfig"} {
		out, err := exec.Command(goTool, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) == 0 || deps[len(deps)-1] != pkg {
			t.Fatalf("go list -deps %s listed %d packages, not ending with it: the check would pass vacuously", pkg, len(deps))
		}
		for _, d := range deps {
			if d == gw || strings.HasPrefix(d, gw+"/") {
				t.Errorf("%s imports %s", pkg, d)
			}
		}
	}
}
