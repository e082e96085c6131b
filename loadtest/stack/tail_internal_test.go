package stack

import (
	"strings"
	"testing"
)

// TestTailKeepsAComponentsLines: a child's log is cut to its last 4 KiB,
// but the lines that hold keep (the trusted sink's) stay in Kept however
// many other lines come after them, even written in pieces.
func TestTailKeepsAComponentsLines(t *testing.T) {
	tl := &tail{keep: "trusted sink"}
	for _, piece := range []string{"a trusted ", "sink: taken\nnoise\n", "trusted sink: joined again\n"} {
		_, _ = tl.Write([]byte(piece))
	}
	for range 1000 {
		_, _ = tl.Write([]byte("record refused verdict=duplicate\n"))
	}
	if got, want := tl.Kept(), "a trusted sink: taken\ntrusted sink: joined again"; got != want {
		t.Fatalf("kept %q, want %q", got, want)
	}
	if s := tl.String(); len(s) > 4096 || strings.Contains(s, "trusted sink") {
		t.Fatalf("the tail holds %d bytes with the pushed-out lines", len(s))
	}
}
