// Package report holds the figures of one load run (Report) and writes
// them as JSON (stable keys that scripts read), as the Markdown summary
// printed at the end of a run, and as a self-contained HTML page with
// charts. It also holds the latency Histogram the harness records into.
//
// A figure that was not measured (a baseline that did not run, a count
// that an external gateway does not expose) reads "not measured" in
// both the Markdown and the HTML, never as a 0 or a -1. The invariants'
// names and statements are written once (Invariants), as docs/design.md
// states them. Each scenario's part of the summary and of the verdict
// is one row of one table (sections.go), keyed by the JSON member the
// harness's scenario table names. It imports nothing of fencegate.
//
// A report must never show a figure it did not measure as a number, nor
// pass a run that asked for load when a check checked nothing
// (Report.Failures, FM94); and the package must never import anything of
// fencegate, so scripts and other tools can read its JSON without the
// gateway.
package report
