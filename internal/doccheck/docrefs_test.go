package doccheck

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// The references a document makes that the repository can check: a Go
// test function by name, a make target, a link to a file and its anchor.
var (
	// testName is a test, fuzz or benchmark function; a trailing * or _*
	// names every function with that prefix ("TestFM01_*").
	testName = regexp.MustCompile(`\b(?:Test|Fuzz|Benchmark)[A-Z0-9_][A-Za-z0-9_]*\*?`)
	// testFunc is the declaration of one in a _test.go file.
	testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]*)\(`)
	// makeCall is "make target" as a command: at the start of a piece of
	// code, after "&& " or a "$ " prompt.
	makeCall = regexp.MustCompile(`(?:^|&& |\$ )make ([a-z][a-z0-9-]*)`)
	// makeTarget is a rule of the Makefile.
	makeTarget = regexp.MustCompile(`(?m)^([a-zA-Z0-9_.-]+):`)
	// mdLink is an inline markdown link; its target ends at a space or ).
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// codeSpan is inline code.
	codeSpan = regexp.MustCompile("`[^`\n]+`")
)

// docFiles are the documents held to their references: the README, every
// file of docs/ (the runbook among them).
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, docs...)
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// goTests lists every test, fuzz and benchmark function of the
// repository's _test.go files (both modules).
func goTests(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(raw), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// testExists: name is a function, or a prefix pattern (ending in *) that
// at least one function matches.
func testExists(name string, tests map[string]bool) bool {
	prefix, wild := strings.CutSuffix(name, "*")
	if !wild {
		return tests[name]
	}
	for n := range tests {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// TestDocsNameExistingTests fails for each Go test, fuzz or benchmark
// function a document names that no _test.go file declares, so a renamed
// or removed test cannot leave a proof in the docs that proves nothing. A
// test that is not written yet may be named on a line that says it is
// "planned".
func TestDocsNameExistingTests(t *testing.T) {
	tests := goTests(t)
	if len(tests) == 0 {
		t.Fatal("no test functions found: the walk is broken")
	}
	var bad []string
	for _, doc := range docFiles(t) {
		for i, line := range strings.Split(readDoc(t, doc), "\n") {
			if strings.Contains(strings.ToLower(line), "planned") {
				continue
			}
			for _, loc := range testName.FindAllStringIndex(line, -1) {
				name := line[loc[0]:loc[1]]
				// "func TestFM03" is a search pattern, not a name.
				if !testExists(name, tests) && !strings.HasSuffix(line[:loc[0]], "func ") {
					bad = append(bad, fmt.Sprintf("%s:%d: %s", rel(doc), i+1, name))
				}
			}
		}
	}
	report(t, bad, "tests named in the docs that do not exist (write \"planned\" on the line if it is)")
}

// TestDocsNameExistingMakeTargets fails for each `make target` in a
// document's code that the Makefile does not define.
func TestDocsNameExistingMakeTargets(t *testing.T) {
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(readDoc(t, filepath.Join(root, "Makefile")), -1) {
		targets[m[1]] = true
	}
	if !targets["test"] {
		t.Fatal("the Makefile has no test target: the parse is broken")
	}
	var bad []string
	for _, doc := range docFiles(t) {
		fenced := false
		for i, line := range strings.Split(readDoc(t, doc), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			for _, code := range codeOf(line, fenced) {
				for _, m := range makeCall.FindAllStringSubmatch(code, -1) {
					if !targets[m[1]] {
						bad = append(bad, fmt.Sprintf("%s:%d: make %s", rel(doc), i+1, m[1]))
					}
				}
			}
		}
	}
	report(t, bad, "make targets named in the docs that the Makefile does not have")
}

// codeOf returns the code of a line: the whole line inside a fenced
// block, else its code spans.
func codeOf(line string, fenced bool) []string {
	if fenced {
		return []string{strings.TrimSpace(line)}
	}
	spans := codeSpan.FindAllString(line, -1)
	for i, span := range spans {
		spans[i] = strings.Trim(span, "`")
	}
	return spans
}

// TestDocsLinkToExistingFilesAndAnchors fails for each markdown link of a
// document to a file of the repository that does not exist, or to an
// anchor that no heading of the target makes (GitHub's rules: lower case,
// punctuation dropped, spaces as dashes, -1, -2 for repeats).
func TestDocsLinkToExistingFilesAndAnchors(t *testing.T) {
	anchors := map[string]map[string]bool{}
	var bad []string
	for _, doc := range docFiles(t) {
		for i, line := range strings.Split(readDoc(t, doc), "\n") {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				if msg := checkLink(doc, m[1], anchors); msg != "" {
					bad = append(bad, fmt.Sprintf("%s:%d: %s: %s", rel(doc), i+1, m[1], msg))
				}
			}
		}
	}
	report(t, bad, "links in the docs to missing files or anchors")
}

// checkLink says what is wrong with link target from doc, "" when
// nothing. Links leaving the repository are not followed.
func checkLink(doc, target string, anchors map[string]map[string]bool) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	path := doc
	if file != "" {
		path = filepath.Join(filepath.Dir(doc), file)
	}
	if _, err := os.Stat(path); err != nil {
		return "no such file"
	}
	if anchor == "" || !strings.HasSuffix(path, ".md") {
		return ""
	}
	if anchors[path] == nil {
		raw, err := os.ReadFile(path)
		if err != nil {
			return err.Error()
		}
		anchors[path] = headingAnchors(string(raw))
	}
	if !anchors[path][anchor] {
		return "no heading makes this anchor"
	}
	return ""
}

// headingAnchors returns the anchors GitHub gives the headings of a
// markdown text, fenced code blocks skipped.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := slug(heading)
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// slug is GitHub's anchor of a heading: lower case, letters, digits,
// dashes and underscores kept, spaces as dashes, everything else dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return r
}

func report(t *testing.T, bad []string, what string) {
	t.Helper()
	if len(bad) == 0 {
		return
	}
	sort.Strings(bad)
	t.Errorf("%d %s:\n%s", len(bad), what, strings.Join(bad, "\n"))
}
