package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/fencegate/fencegate/internal/telemetry"
)

// runVersion prints what the binary is: the same fields as the
// fencegate_build_info metric, so that an operator can match a running
// process with the binary on disk.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("version", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	b := telemetry.Build()
	if *asJSON {
		return json.NewEncoder(stdout).Encode(b)
	}
	_, err := fmt.Fprintf(stdout, "fencegate %s (commit %s, %s, librdkafka %s)\n", b.Version, b.Commit, b.GoVersion, b.Librdkafka)
	return err
}
