// Package doccheck holds tests over the whole repository that keep its
// documentation true: every exported identifier's doc comment starts with
// its name, as franz-go and river write theirs, so godoc reads as
// sentences about the thing named; every package doc says what the
// package must never do; and the documents (README.md, docs/) name only
// tests, make targets, files and anchors that exist (docrefs_test.go).
//
// It must never be satisfied by editing the test instead of the doc: a
// failure names the file and line to fix.
package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// root is the repository, two levels above this package.
const root = "../.."

// TestExportedDocStartsWithName walks every non-test Go file of both
// modules (the gateway's and the SDK's) and lists each exported function,
// method, type, constant and variable whose doc comment is missing or
// does not start with its name. A constant or variable in a group is
// covered by the group's comment.
func TestExportedDocStartsWithName(t *testing.T) {
	fset := token.NewFileSet()
	var bad []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		for _, miss := range undocumented(f) {
			bad = append(bad, fset.Position(miss.pos).String()+": "+miss.name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("%d exported identifiers whose doc comment does not start with their name:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

type miss struct {
	name string
	pos  token.Pos
}

// undocumented lists the exported declarations of f whose doc does not
// start with their name.
func undocumented(f *ast.File) []miss {
	var out []miss
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && exportedRecv(d) && !startsWith(d.Doc, d.Name.Name) {
				out = append(out, miss{d.Name.Name, d.Pos()})
			}
		case *ast.GenDecl:
			out = append(out, undocumentedSpecs(d)...)
		}
	}
	return out
}

func undocumentedSpecs(d *ast.GenDecl) []miss {
	var out []miss
	grouped := d.Lparen.IsValid() && len(d.Specs) > 1
	for _, spec := range d.Specs {
		switch s := spec.(type) {
		case *ast.TypeSpec:
			doc := s.Doc
			if doc == nil && !grouped {
				doc = d.Doc
			}
			if s.Name.IsExported() && !startsWith(doc, s.Name.Name) {
				out = append(out, miss{s.Name.Name, s.Pos()})
			}
		case *ast.ValueSpec:
			if grouped && d.Doc != nil {
				continue
			}
			doc := s.Doc
			if doc == nil {
				doc = d.Doc
			}
			for _, n := range s.Names {
				if n.IsExported() && !startsWith(doc, n.Name) && s.Comment == nil {
					out = append(out, miss{n.Name, n.Pos()})
				}
			}
		}
	}
	return out
}

// exportedRecv: a function, or a method on an exported type.
func exportedRecv(d *ast.FuncDecl) bool {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return true
	}
	t := d.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return true
		}
	}
}

// startsWith: the doc's first word is name, after an optional article
// ("A", "An", "The"), as golint allowed.
func startsWith(doc *ast.CommentGroup, name string) bool {
	if doc == nil {
		return false
	}
	text := doc.Text()
	for _, article := range []string{"A ", "An ", "The "} {
		text = strings.TrimPrefix(text, article)
	}
	rest, ok := strings.CutPrefix(text, name)
	return ok && (rest == "" || !isIdentChar(rest[0]))
}

func isIdentChar(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// packageDocPending are the packages whose doc does not yet say what the
// package must never do. Empty since issue 44: every package's does. A
// package may be added only while its files are being rewritten, and the
// test fails when one of them gains the sentence, so that the list only
// shrinks. A package under a pending one is pending too.
var packageDocPending = map[string]bool{}

// pending: dir or a folder above it is in packageDocPending.
func pending(dir string) bool {
	for d := dir; d != "." && d != "/"; d = filepath.ToSlash(filepath.Dir(d)) {
		if packageDocPending[d] {
			return true
		}
	}
	return false
}

// TestPackageDocSaysWhatItMustNeverDo walks every package of both modules
// (main packages included) and lists each whose package doc is missing or
// has no "must never" sentence: a package doc says what the package is
// for and what it must never do, as river's do.
func TestPackageDocSaysWhatItMustNeverDo(t *testing.T) {
	docs := map[string]string{} // package directory -> its package doc
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		dir = filepath.ToSlash(dir)
		if f.Doc != nil {
			docs[dir] += f.Doc.Text()
		} else if _, ok := docs[dir]; !ok {
			docs[dir] = ""
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for dir, doc := range docs {
		has := strings.Contains(doc, "must never")
		switch {
		case packageDocPending[dir] && has:
			bad = append(bad, dir+": says what it must never do now: take it off packageDocPending")
		case !pending(dir) && doc == "":
			bad = append(bad, dir+": no package doc")
		case !pending(dir) && !has:
			bad = append(bad, dir+`: the package doc does not say what the package "must never" do`)
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("%d packages:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}
