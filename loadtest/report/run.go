package report

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// RunInfo says which run a report is of: when it started (UTC), the
// fencegate that ran it (version and commit of the binary's build info,
// "unknown" when absent) and its command line.
type RunInfo struct {
	Date    time.Time `json:"date"`
	Version string    `json:"version"`
	Commit  string    `json:"commit"`
	Command string    `json:"command"`
}

// unknown stands for build information the binary does not carry.
const unknown = "unknown"

// NewRunInfo returns the RunInfo of a run started at date by the given
// build with the command line args, the passwords of URLs in it
// redacted (secrets are refused on the command line, but a database URL
// may carry one).
func NewRunInfo(date time.Time, version, commit string, args []string) RunInfo {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = redact(a)
	}
	return RunInfo{Date: date.UTC(), Version: orUnknown(version), Commit: orUnknown(commit), Command: strings.Join(out, " ")}
}

func orUnknown(s string) string {
	if s == "" {
		return unknown
	}
	return s
}

// redact hides the password of a URL argument, alone or as --flag=URL.
func redact(arg string) string {
	flag, value, isFlag := strings.Cut(arg, "=")
	if !isFlag || !strings.HasPrefix(flag, "-") {
		flag, value = "", arg
	}
	u, err := url.Parse(value)
	if err != nil || u.User == nil {
		return arg
	}
	if _, has := u.User.Password(); !has {
		return arg
	}
	if flag != "" {
		return flag + "=" + u.Redacted()
	}
	return u.Redacted()
}

// date is the run's start in UTC, RFC 3339 ("not measured" when unset).
func (ri RunInfo) date() string {
	return measured(!ri.Date.IsZero(), "%s", ri.Date.UTC().Format(time.RFC3339)).Text
}

// summary is the run line of the Markdown summary.
func (ri RunInfo) summary() string {
	return fmt.Sprintf("%s, fencegate %s (commit %s): `%s`", ri.date(), orUnknown(ri.Version), orUnknown(ri.Commit), ri.Command)
}

// cells are the HTML report's rows of the run.
func (ri RunInfo) cells() [][2]cell {
	return [][2]cell{
		{text("date (UTC)"), text(ri.date())},
		{text("fencegate version"), text(orUnknown(ri.Version))},
		{text("git commit"), text(orUnknown(ri.Commit))},
		{text("command line"), measured(ri.Command != "", "%s", ri.Command)},
	}
}
