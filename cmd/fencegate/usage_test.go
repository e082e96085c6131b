package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// subcommands are the commands whose -h lists subcommands rather than
// flags, and those subcommands.
var subcommands = map[string][]string{
	"leases":  {"list", "show", "watch", "prune-events"},
	"ledger":  {"prune"},
	"routes":  {"set-partitions"},
	"rollout": {"status", "observe", "gate", "enforce"},
}

// usageEntry is one flag as -h prints it: "  -name ARG" and its text.
type usageEntry struct {
	name, arg, text string
}

var (
	usageFlagLine = regexp.MustCompile(`^  -([a-z0-9-]+)(?: (.*))?$`)
	usageTextLine = regexp.MustCompile(`^    \t(.*)$`)
	// plainArg is what may stand after a flag's name: nothing (a bool),
	// the flag package's type words, or a deliberate UPPERCASE placeholder
	// (NAME, FLAG). A backticked phrase in a usage string becomes this
	// name (flag.UnquoteUsage), which is how `fencegate dev` became one.
	plainArg = regexp.MustCompile(`^(|string|duration|int|uint|float|[A-Z][A-Z0-9_]*)$`)
	envRef   = regexp.MustCompile(`FENCEGATE_[A-Z0-9_]+`)
)

// renderUsage runs fencegate args... -h and returns what it printed and
// its flags.
func renderUsage(t *testing.T, args ...string) (string, []usageEntry) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), append(args, "-h"), &out, &errb); code != 0 {
		t.Fatalf("fencegate %s -h: exit %d, want 0: %s", strings.Join(args, " "), code, errb.String())
	}
	text := out.String() + errb.String()
	var entries []usageEntry
	for _, line := range strings.Split(text, "\n") {
		if m := usageFlagLine.FindStringSubmatch(line); m != nil {
			entries = append(entries, usageEntry{name: m[1], arg: m[2]})
			continue
		}
		if m := usageTextLine.FindStringSubmatch(line); m != nil && len(entries) > 0 {
			entries[len(entries)-1].text += m[1]
		}
	}
	return text, entries
}

// everyUsage renders the usage of every command, hidden ones and
// subcommands included, keyed by the command line.
func everyUsage(t *testing.T) map[string][]usageEntry {
	t.Helper()
	all := map[string][]usageEntry{}
	names := append(sortedKeys(commands()), sortedKeys(hiddenCommands())...)
	for _, name := range names {
		text, entries := renderUsage(t, name)
		subs, hasSubs := subcommands[name]
		switch {
		case hasSubs && len(entries) > 0:
			t.Errorf("fencegate %s -h lists flags, want its subcommands:\n%s", name, text)
		case !hasSubs && len(entries) == 0:
			t.Errorf("fencegate %s -h lists no flags (a command with subcommands belongs in subcommands):\n%s", name, text)
		}
		for _, sub := range subs {
			if !strings.Contains(text, "fencegate "+name+" "+sub) {
				t.Errorf("fencegate %s -h does not name %s:\n%s", name, sub, text)
			}
			_, all[name+" "+sub] = renderUsage(t, name, sub)
		}
		if !hasSubs {
			all[name] = entries
		}
	}
	return all
}

// settingsCommands are the commands whose every flag is a setting and
// reads its FENCEGATE_* variable.
var settingsCommands = map[string]bool{"serve": true, "materialize": true, "dev": true, "migrate": true}

// TestUsageReadsRight: every flag of every command is printed with a
// plain argument name, its text keeps no backtick, and it names its
// FENCEGATE_* variable at most once, in the trailing [ ] of a setting or
// a secret; every flag of serve, materialize, dev and migrate is marked.
func TestUsageReadsRight(t *testing.T) {
	t.Parallel()
	for cmd, entries := range everyUsage(t) {
		for _, e := range entries {
			if settingsCommands[cmd] && !strings.Contains(e.text, "["+envName(e.name)) {
				t.Errorf("fencegate %s: -%s is a setting but -h marks no %s: %q", cmd, e.name, envName(e.name), e.text)
			}
			if !plainArg.MatchString(e.arg) {
				t.Errorf("fencegate %s: -%s %s: the argument name is not a placeholder (a backticked phrase in its usage?)", cmd, e.name, e.arg)
			}
			if strings.Contains(e.text, "`") {
				t.Errorf("fencegate %s: -%s: backtick left in %q", cmd, e.name, e.text)
			}
			own := envName(e.name)
			if n := strings.Count(e.text, own); n > 1 {
				t.Errorf("fencegate %s: -%s names %s %d times: %q", cmd, e.name, own, n, e.text)
			}
			for _, v := range envRef.FindAllString(e.text, -1) {
				if v != own && !strings.HasPrefix(v, own) {
					continue
				}
				if !strings.Contains(e.text, "["+own) {
					t.Errorf("fencegate %s: -%s names %s outside its [ ]: %q", cmd, e.name, v, e.text)
				}
			}
		}
	}
}

// TestLeasesUsage: `leases -h` lists the subcommands and exits 0; `leases
// show -h` names its NAME argument and no --prefix, which only list has.
func TestLeasesUsage(t *testing.T) {
	t.Parallel()
	text, _ := renderUsage(t, "leases")
	for _, want := range []string{"fencegate leases list", "fencegate leases show"} {
		if !strings.Contains(text, want) {
			t.Errorf("leases -h lacks %q:\n%s", want, text)
		}
	}
	text, entries := renderUsage(t, "leases", "show")
	if !strings.Contains(text, "usage: fencegate leases show [flags] NAME") {
		t.Errorf("leases show -h does not name NAME:\n%s", text)
	}
	for _, e := range entries {
		if e.name == "prefix" {
			t.Errorf("leases show -h lists -prefix:\n%s", text)
		}
	}
	_, entries = renderUsage(t, "leases", "list")
	found := false
	for _, e := range entries {
		found = found || e.name == "prefix"
	}
	if !found {
		t.Error("leases list -h lacks -prefix")
	}
}
