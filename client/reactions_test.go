package client

import (
	"go/ast"
	"go/parser"
	"go/token"
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
