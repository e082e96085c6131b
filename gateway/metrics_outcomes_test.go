package gateway

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestEveryBatchOutcomeExistsAtStart: every string outcome constant of the
// package is in batchOutcomes, the list created at 0 at start, so a new
// outcome cannot be born at 1 (invisible to increase()); and the routing
// answers are misrouted, never stale_token.
func TestEveryBatchOutcomeExistsAtStart(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "metrics.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !strings.HasPrefix(name.Name, "outcome") || !ok || lit.Kind != token.STRING {
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				n++
				if !slices.Contains(batchOutcomes, v) {
					t.Errorf("outcome %s = %q is not in batchOutcomes: its series would be born at 1", name.Name, v)
				}
			}
		}
	}
	if n < 7 {
		t.Fatalf("found %d outcome constants in metrics.go, want at least 7", n)
	}
	fencedAfterCommit := &Error{Code: CodeGenerationEnded, Members: Members{Cause: string(CodeFenced)}}
	if got := batchOutcome(fencedAfterCommit); got != outcomeFencedOut {
		t.Errorf("generation_ended caused by a fence counted as %s, want fenced", got)
	}
	for code, want := range map[Code]string{
		CodeMisdirected: outcomeMisrouted, CodeNotHolder: outcomeMisrouted,
		CodeLeaseLost: outcomeStaleToken, CodeFenced: outcomeFencedOut,
		CodeInvalidRequest: outcomeInvalid, CodeKafkaUnavailable: outcomeAborted,
	} {
		if got := batchOutcome(errorf(code, "x")); got != want {
			t.Errorf("batchOutcome(%s) = %s, want %s", code, got, want)
		}
	}
}
