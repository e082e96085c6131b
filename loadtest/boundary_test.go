package loadtest_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoProductionPackageImportsTheHarness holds the boundary of
// docs/design.md: no package of the module but the harness's own and
// cmd/ links loadtest/ or its rooms, directly or through another
// package, and loadtest/report links nothing of fencegate.
func TestNoProductionPackageImportsTheHarness(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command lists the dependencies: %v", err)
	}
	const mod = "github.com/fencegate/fencegate"
	const harness = mod + "/loadtest"
	out, err := exec.Command(goTool, "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, mod+"/...").Output()
	if err != nil {
		t.Fatalf("go list %s/...: %v", mod, err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, deps := f[0], f[1:]
		switch {
		case pkg == harness+"/report":
			for _, d := range deps {
				if d == mod || strings.HasPrefix(d, mod+"/") {
					t.Errorf("%s imports %s", pkg, d)
				}
			}
		case pkg == harness || strings.HasPrefix(pkg, harness+"/") || strings.HasPrefix(pkg, mod+"/cmd/"):
		default:
			checked++
			for _, d := range deps {
				if d == harness || strings.HasPrefix(d, harness+"/") {
					t.Errorf("%s imports %s", pkg, d)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d production packages listed: the check would pass vacuously", checked)
	}
}
