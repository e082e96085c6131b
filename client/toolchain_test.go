package client_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// toolchainCheck is set in the environment of the tests run with the
// oldest toolchain, so that they do not start the check again.
const toolchainCheck = "FENCEGATE_SDK_TOOLCHAIN_CHECK"

// TestBuildsWithTheGoOfItsGoLine: the go line of go.mod is the oldest Go
// a worker can build the SDK with, and the module builds, vets and passes
// its tests with that release (the line is chosen as the lowest that
// does: json's omitzero and testing.B.Loop came in Go 1.24). The go
// command fetches that toolchain from the module proxy
// (golang.org/toolchain); without one the test skips and says so.
func TestBuildsWithTheGoOfItsGoLine(t *testing.T) {
	if os.Getenv(toolchainCheck) != "" {
		t.Skip("already running under the oldest toolchain")
	}
	if testing.Short() {
		t.Skip("-short: not building with a second toolchain")
	}
	raw, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	toolchain := "go" + string(m[1])
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH: %v", err)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(gocmd, args...)
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+toolchain, toolchainCheck+"=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("version")
	if err != nil {
		t.Skipf("toolchain %s cannot be fetched (GOTOOLCHAIN=%s go version: %v): %s", toolchain, toolchain, err, strings.TrimSpace(out))
	}
	// The first run on a machine also prints "go: downloading ...".
	if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool { return strings.HasPrefix(l, "go version "+toolchain+" ") }) {
		t.Fatalf("GOTOOLCHAIN=%s runs %q", toolchain, strings.TrimSpace(out))
	}
	for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "./..."}} {
		if out, err := run(args...); err != nil {
			t.Fatalf("GOTOOLCHAIN=%s go %s: %v\n%s", toolchain, strings.Join(args, " "), err, out)
		}
	}
	t.Logf("built, vetted and tested with %s", toolchain)
}
