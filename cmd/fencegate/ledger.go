package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/fencegate/fencegate/materializer"
)

// ledgerUsage lists the subcommands of ledger.
const ledgerUsage = `usage: fencegate ledger prune [flags]   delete ledger rows older than the retention, in batches (--dry-run: count them)
fencegate ledger prune -h lists the flags.`

// pruneInterval is how often a materializer with a retention prunes its
// ledger (docs/RUNBOOK.md, "Ledger retention").
const pruneInterval = time.Hour

// defaultLedgerValues and parseLedgerValues are the materializer's, for
// functions where a flag variable named materializer hides the package.
var (
	defaultLedgerValues = materializer.DefaultLedgerValues
	parseLedgerValues   = materializer.ParseLedgerValues
)

// age is a duration flag that also reads whole days ("7d"); "0" is zero.
type age struct{ d *time.Duration }

func (a age) String() string {
	if a.d == nil || *a.d == 0 {
		return "0"
	}
	if *a.d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", *a.d/(24*time.Hour))
	}
	return a.d.String()
}

func (a age) Set(s string) error {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 16)
		if err != nil {
			return fmt.Errorf("%q: want whole days (7d) or a Go duration (36h)", s)
		}
		*a.d = time.Duration(n) * 24 * time.Hour
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("%q: want whole days (7d) or a Go duration (36h), not negative", s)
	}
	*a.d = d
	return nil
}

// ledgerFlags are the materializer's ledger settings. The zero value
// (fencegate dev's) is the defaults.
type ledgerFlags struct {
	values string
	// retention is 0 for the default; forever is --ledger-retention 0.
	retention time.Duration
	forever   bool
}

// retentionValue is --ledger-retention: an age, or 0 for forever.
type retentionValue struct{ f *ledgerFlags }

func (v retentionValue) String() string {
	if v.f == nil {
		return ""
	}
	if v.f.forever {
		return "0"
	}
	d := cmp.Or(v.f.retention, materializer.DefaultLedgerRetention)
	return age{&d}.String()
}

func (v retentionValue) Set(s string) error {
	if err := (age{&v.f.retention}).Set(s); err != nil {
		return err
	}
	v.f.forever = v.f.retention == 0
	return nil
}

func (f *ledgerFlags) register(fs *cmdFlags) {
	fs.settingsOf(func() {
		fs.StringVar(&f.values, "ledger-values", string(materializer.DefaultLedgerValues),
			"what the ledger keeps of an accepted record: keep (key, value, headers) or drop (a SHA-256 digest of them)")
		fs.Var(retentionValue{f}, "ledger-retention",
			"prune ledger rows older than `AGE` (7d, 36h) every hour: the dedup window (a retry applied more than AGE after its batch was accepted is accepted again); 0 keeps the ledger forever")
	})
}

// record checks the values mode and records the retention in the
// ledger; it returns the mode.
func (f *ledgerFlags) record(ctx context.Context, pool *pgxpool.Pool) (materializer.LedgerValues, error) {
	values, err := materializer.ParseLedgerValues(cmp.Or(f.values, string(materializer.DefaultLedgerValues)))
	if err != nil {
		return "", usagef("--ledger-values: %v", err)
	}
	retention := cmp.Or(f.retention, materializer.DefaultLedgerRetention)
	if f.forever {
		retention = 0
	}
	return values, materializer.SetRetention(ctx, pool, retention)
}

// prune prunes m's ledger in g every pruneInterval, unless the retention
// is forever.
func (f *ledgerFlags) prune(ctx context.Context, g *errgroup.Group, m *materializer.Materializer) {
	if !f.forever {
		g.Go(func() error { m.PruneEvery(ctx, pruneInterval); return nil })
	}
}

// runLedger is `ledger prune`: one prune of the ledger, safe while
// materializers run.
func runLedger(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stderr, ledgerUsage)
		return flag.ErrHelp
	}
	if len(args) == 0 || args[0] != "prune" {
		return usagef("%s", ledgerUsage)
	}
	fs := flagSet("ledger prune", stderr)
	var dbURL *string
	fs.settingsOf(func() { dbURL = fs.String("database-url", defaultDatabaseURL, "Postgres URL of the ledger") })
	var cfg materializer.PruneConfig
	fs.Var(age{&cfg.OlderThan}, "older-than",
		"delete rows older than `AGE` (7d, 36h; default: the retention the materializer recorded); refused below it")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "count the rows that would be deleted; delete none")
	fs.IntVar(&cfg.Batch, "batch", materializer.DefaultPruneBatch, "most rows one statement deletes")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("%s", ledgerUsage)
	}
	pool, err := openPool(ctx, *dbURL, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	rep, err := materializer.Prune(ctx, pool, cfg)
	if err != nil {
		return err
	}
	verb := "deleted"
	if cfg.DryRun {
		verb = "would delete (dry run)"
	}
	fmt.Fprintf(stdout, "rows older than %v (accepted before %s; retention %v): %s accepted %d, rejected %d, kept %d, in %d statements\n",
		rep.OlderThan, rep.Cutoff.UTC().Format(time.RFC3339), rep.RetentionFound, verb, rep.Accepted, rep.Rejected, rep.Kept, rep.Statements)
	return nil
}
