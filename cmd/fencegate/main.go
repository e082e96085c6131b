// Command fencegate is the exclusive Kafka produce gateway: one binary with
// the subcommands serve (the gateway), materialize (the ledger), ledger
// (pruning it), dev (the whole stack on a development broker), migrate,
// routes, leases (the operator's view), rollout (moving a fleet onto the
// gateway), verify-broker (does the cluster fence), loadtest (the
// harness) and version, listed by
// commands(); the harness's child processes run hidden subcommands
// (hidden.go).
//
// It must never hold a rule of its own: the commands wire the packages
// that carry each rule, and read secrets from files or the environment,
// never from the command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"migrate":       {"apply the embedded database migrations", runMigrate},
		"serve":         {"run the gateway", runServe},
		"loadtest":      {"load and fault harness with invariant checks and baselines", runLoadtest},
		"leases":        {"operator view: leases list [--prefix P] | show NAME | watch [--prefix P] | prune-events (leases -h)", runLeases},
		"materialize":   {"run the materializer (read_committed -> Postgres ledger)", runMaterialize},
		"ledger":        {"ledger prune [--older-than AGE] [--dry-run]: delete ledger rows past the retention (ledger -h)", runLedger},
		"rollout":       {"rollout status [PATTERN] | observe|gate|enforce PATTERN: move a route's fleet onto the gateway (rollout -h)", runRollout},
		"routes":        {"routes set-partitions --config F --pattern P --partitions N: record a route's new partition count (routes -h)", runRoutes},
		"dev":           {"run the whole stack on embedded defaults (development broker)", runDev},
		"version":       {"print version, commit, Go and librdkafka versions (also --version)", runVersion},
		"verify-broker": {"check that the Kafka cluster fences zombies and has safe settings: PASS/WARN/FAIL, exit 0/1/2 (verify-broker -h)", runVerifyBroker},
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || isHelp(args[0]) {
		usage(stdout, cmds)
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args[0] = "version"
	}
	c, ok := cmds[args[0]]
	if !ok {
		c, ok = hiddenCommands()[args[0]]
	}
	if !ok {
		fmt.Fprintf(stderr, "fencegate: unknown command %q\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
		var ue usageError
		var ee exitError
		switch {
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ee):
			fmt.Fprintf(stderr, "fencegate %s: %v\n", args[0], err)
			return ee.code
		case errors.As(err, &ue):
			if !ue.printed { // the flag package printed its own, with the usage
				fmt.Fprintf(stderr, "fencegate %s: %v\n", args[0], err)
			}
			return 2
		}
		fmt.Fprintf(stderr, "fencegate %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// exitError ends a command with its own exit status, its message printed.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// isHelp says whether arg asks for the usage.
func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "--help" || arg == "-help"
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: fencegate <command> [flags]")
	fmt.Fprintln(w, "commands:")
	for _, name := range sortedKeys(cmds) {
		fmt.Fprintf(w, "  %-14s %s\n", name, cmds[name].summary)
	}
}
