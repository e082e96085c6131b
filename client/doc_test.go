package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryExportedIdentifierIsDocumented: each exported function,
// method, type, constant and variable of the package has a doc comment
// that starts with its name (a constant or variable of a documented group
// may go without one), as the house rule asks.
func TestEveryExportedIdentifierIsDocumented(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	starts := func(doc *ast.CommentGroup, names ...string) bool {
		for _, n := range names {
			if doc != nil && (strings.HasPrefix(doc.Text(), n+" ") || strings.HasPrefix(doc.Text(), n+":")) {
				return true
			}
		}
		return false
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() && (d.Recv == nil || exportedRecv(d.Recv)) && !starts(d.Doc, d.Name.Name) {
					t.Errorf("func %s: doc comment does not start with its name", d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						doc := s.Doc
						if doc == nil && !d.Lparen.IsValid() {
							doc = d.Doc
						}
						if s.Name.IsExported() && !starts(doc, s.Name.Name) {
							t.Errorf("type %s: doc comment does not start with its name", s.Name.Name)
						}
					case *ast.ValueSpec:
						var names []string
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
						doc := s.Doc
						if doc == nil && !d.Lparen.IsValid() {
							doc = d.Doc
						}
						grouped := d.Lparen.IsValid() && d.Doc != nil && s.Doc == nil
						if len(names) > 0 && !grouped && !starts(doc, names...) {
							t.Errorf("%s %v: doc comment does not start with its name", d.Tok, names)
						}
					}
				}
			}
		}
	}
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(recv *ast.FieldList) bool {
	typ := recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}
