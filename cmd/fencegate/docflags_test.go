package main

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var (
	// docCommand is a fencegate command line in a document's code:
	// "fencegate serve --listen ...", "bin/fencegate leases list --prefix".
	docCommand = regexp.MustCompile(`\bfencegate ([a-z-]+)((?: [^|;&#]*)?)`)
	// docFlag is a flag on such a line, its name up to "=" or a space.
	docFlag = regexp.MustCompile(`(?:^| )--([a-z0-9][a-z0-9-]*)`)
	// docCodeSpan is inline code in a document.
	docCodeSpan = regexp.MustCompile("`[^`]+`")
)

// TestDocsNameRegisteredFlags fails for each `fencegate <command> --flag`
// in the code of README.md or docs/*.md (a code span, or a fenced block
// with its \ continuations joined) whose command does not register the
// flag, so a renamed or removed flag cannot linger in the docs.
func TestDocsNameRegisteredFlags(t *testing.T) {
	t.Parallel()
	flags := map[string]map[string]bool{}
	for cmd, entries := range everyUsage(t) {
		flags[cmd] = map[string]bool{"help": true, "h": true}
		for _, e := range entries {
			flags[cmd][e.name] = true
		}
	}
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, doc := range append(docs, filepath.Join(repoRoot, "README.md")) {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, code := range docCode(string(raw)) {
			for _, m := range docCommand.FindAllStringSubmatch(code, -1) {
				cmd, rest := m[1], m[2]
				if _, ok := subcommands[cmd]; ok {
					sub, tail, _ := strings.Cut(strings.TrimSpace(rest), " ")
					cmd, rest = cmd+" "+sub, " "+tail
				}
				known, ok := flags[cmd]
				if !ok {
					continue // not a command line ("fencegate dev's database")
				}
				for _, f := range docFlag.FindAllStringSubmatch(rest, -1) {
					if !known[f[1]] {
						bad = append(bad, filepath.Base(doc)+": fencegate "+cmd+" --"+f[1])
					}
				}
			}
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Errorf("%d flags the docs give a command that it does not register:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

// docCode returns the code of a markdown text: each code span (which may
// run over a line break), and each command of a fenced block with its \
// continuation lines joined.
func docCode(text string) []string {
	var out []string
	var prose []string
	fenced, cont := false, ""
	spans := func() {
		joined := strings.Join(prose, " ")
		for _, span := range docCodeSpan.FindAllString(joined, -1) {
			out = append(out, strings.Trim(span, "`"))
		}
		prose = prose[:0]
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if !fenced {
				spans()
			}
			fenced, cont = !fenced, ""
			continue
		}
		if !fenced {
			prose = append(prose, line)
			if strings.TrimSpace(line) == "" { // a span ends with its paragraph
				spans()
			}
			continue
		}
		joined, more := strings.CutSuffix(strings.TrimSpace(line), `\`)
		cont += " " + joined
		if !more {
			out = append(out, cont)
			cont = ""
		}
	}
	spans()
	return out
}

// TestDocsJoinOnAFreePort fails when a document starts a second dev
// replica (`fencegate dev --join`) on a port the first `fencegate dev`
// already listens on by default: the gateway's, the broker's or the
// materializer's (the README once gave it the materializer's 8081).
func TestDocsJoinOnAFreePort(t *testing.T) {
	t.Parallel()
	taken := map[string]string{
		defaultListen:             "the gateway's --listen",
		defaultKafkaBrokers:       "the development broker's --kafka-listen",
		defaultMaterializerListen: "the materializer's --materializer-listen",
	}
	listen := regexp.MustCompile(`--listen[ =](\S+)`)
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	joins := 0
	for _, doc := range append(docs, filepath.Join(repoRoot, "README.md")) {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, code := range docCode(string(raw)) {
			if !strings.Contains(code, "dev --join") {
				continue
			}
			joins++
			for _, m := range listen.FindAllStringSubmatch(code, -1) {
				if what, ok := taken[m[1]]; ok {
					t.Errorf("%s: fencegate dev --join --listen %s: %s", filepath.Base(doc), m[1], what)
				}
			}
		}
	}
	if joins == 0 {
		t.Fatal("no document shows fencegate dev --join: the parse is broken, or the docs lost it")
	}
}
