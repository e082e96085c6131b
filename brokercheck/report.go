package brokercheck

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Status is the outcome of one check.
type Status string

// The statuses, from best to worst as ExitCode reads them.
const (
	Pass  Status = "PASS"
	Warn  Status = "WARN"
	Fail  Status = "FAIL"
	Error Status = "ERROR"
)

// Result is the outcome of one check on one subject.
type Result struct {
	// Check names the property (doc.go lists them).
	Check string `json:"check"`
	// Subject is what it was checked on: a topic, "cluster", a
	// transactional id.
	Subject  string `json:"subject"`
	Status   Status `json:"status"`
	Evidence string `json:"evidence"`
	// Fix says what to change, for a WARN, FAIL or ERROR.
	Fix string `json:"fix,omitempty"`
	// Unsafe is set on a FAIL that serve refuses: the name
	// --allow-unsafe-broker takes to start anyway.
	Unsafe string `json:"unsafe,omitempty"`
}

// Report is the outcome of a verify-broker run.
type Report struct {
	Brokers string   `json:"brokers"`
	Results []Result `json:"results"`
	// Took is the run's duration, rounded.
	Took string `json:"took"`
}

// Exit codes of verify-broker.
const (
	ExitPass        = 0
	ExitFail        = 1
	ExitCouldNotRun = 2
)

// ExitCode is 1 when a check failed, else 2 when a check could not run,
// else 0 (WARNs pass).
func (r Report) ExitCode() int {
	code := ExitPass
	for _, res := range r.Results {
		switch res.Status {
		case Fail:
			return ExitFail
		case Error:
			code = ExitCouldNotRun
		}
	}
	return code
}

// Count returns how many results have status s.
func (r Report) Count(s Status) int {
	n := 0
	for _, res := range r.Results {
		if res.Status == s {
			n++
		}
	}
	return n
}

// WriteJSON writes the report as one indented JSON object.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for a reader: one line per result, its
// fix on the line below, and a summary.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "STATUS\tCHECK\tSUBJECT\tEVIDENCE\n")
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", res.Status, res.Check, res.Subject, oneLine(res.Evidence))
		if res.Fix != "" {
			fmt.Fprintf(tw, "\t\t\tfix: %s\n", oneLine(res.Fix))
		}
		if res.Unsafe != "" {
			fmt.Fprintf(tw, "\t\t\tserve refuses this (override: --allow-unsafe-broker=%s)\n", res.Unsafe)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s: %d PASS, %d WARN, %d FAIL, %d ERROR in %s (%s)\n", r.verdict(),
		r.Count(Pass), r.Count(Warn), r.Count(Fail), r.Count(Error), r.Took, r.Brokers)
	return err
}

func (r Report) verdict() string {
	switch r.ExitCode() {
	case ExitFail:
		return "FAIL"
	case ExitCouldNotRun:
		return "COULD NOT RUN"
	}
	return "PASS"
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
