package client

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestEveryCodeHasAReaction: the reaction table covers every Code
// constant, so renewal and produce never meet a code they do not know.
func TestEveryCodeHasAReaction(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		vs, ok := node.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if !strings.HasPrefix(name.Name, "Code") {
				continue
			}
			code, _ := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
			n++
			if _, ok := reactions[code]; !ok {
				t.Errorf("%s (%q) has no reaction", name.Name, code)
			}
		}
		return true
	})
	if n == 0 || n != len(reactions) {
		t.Errorf("%d Code constants, %d reactions", n, len(reactions))
	}
}

// TestEveryCodeHasOneOutcome: each row of the code table of docs/api.md
// ("definite for a produce?") says what ProduceOutcome says, and the table
// lists every Code constant once. The docs are the table's prose; this
// function is the table (the harness imports it).
func TestEveryCodeHasOneOutcome(t *testing.T) {
	raw, err := os.ReadFile("../docs/api.md")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("docs/api.md is not next to this module (not a checkout of the repository)")
	}
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int{}
	for _, line := range strings.Split(string(raw), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 6 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		code := strings.Trim(strings.TrimSpace(cells[1]), "`")
		status, err := strconv.Atoi(strings.TrimSpace(cells[2]))
		if err != nil {
			continue // another table whose first cell is code
		}
		rows[code]++
		got := ProduceOutcome(status, code)
		switch docs := strings.TrimSpace(cells[4]); {
		case docs == "n/a": // not an answer to a produce
		case docs == "yes":
			if got != OutcomeRefused {
				t.Errorf("%d %s: docs say definite, ProduceOutcome says %v", status, code, got)
			}
		case strings.HasPrefix(strings.Trim(docs, "*"), "no"):
			if got != OutcomeUnknown {
				t.Errorf("%d %s: docs say not definite, ProduceOutcome says %v", status, code, got)
			}
		default:
			t.Errorf("%d %s: docs cell %q is neither yes, no nor n/a", status, code, docs)
		}
	}
	for code := range reactions {
		if rows[code] != 1 {
			t.Errorf("code %q has %d rows in the code table of docs/api.md, want 1", code, rows[code])
		}
	}
	if len(rows) != len(reactions) {
		t.Errorf("docs/api.md lists %d codes, the SDK knows %d", len(rows), len(reactions))
	}
}

// TestProduceOutcome: the answers the code table does not list.
func TestProduceOutcome(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		code   string
		want   Outcome
	}{
		{"committed", 200, "", OutcomeCommitted},
		{"no answer", 0, "", OutcomeUnknown},
		{"a proxy's 502", 502, "", OutcomeUnknown},
		{"an unknown 4xx code", 418, "teapot", OutcomeRefused},
		{"an unknown 5xx code", 503, "newer", OutcomeUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ProduceOutcome(tc.status, tc.code); got != tc.want {
				t.Errorf("ProduceOutcome(%d, %q) = %v, want %v", tc.status, tc.code, got, tc.want)
			}
		})
	}
}
