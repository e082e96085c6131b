package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// routesFlags are the settings of `routes set-partitions`.
type routesFlags struct {
	commonFlags
	ledgerURL  string
	pattern    string
	partitions int
}

// register registers the connection and config flags as settings (as
// serve's); the route and its count are this run's, never the
// environment's (FENCEGATE_PARTITIONS is the materializer's).
func (f *routesFlags) register(fs *cmdFlags) {
	fs.settingsOf(func() {
		fs.StringVar(&f.databaseURL, "database-url", defaultDatabaseURL, "Postgres URL of the lease store")
		fs.StringVar(&f.ledgerURL, "ledger-database-url", "", "Postgres URL of the ledger, the --database-url of materialize (empty: --database-url)")
		fs.StringVar(&f.brokers, "kafka-brokers", defaultKafkaBrokers, "Kafka bootstrap servers")
		f.registerKafka(fs, "operator")
		fs.StringVar(&f.configPath, "config", "", "routes and clients YAML file of the deployment (required)")
	})
	fs.StringVar(&f.pattern, "pattern", "", "pattern of the route, exactly as in the config (required)")
	fs.IntVar(&f.partitions, "partitions", 0, "the route's new partition count: the topic's, after growing it (required)")
}

// runRoutes is `routes set-partitions`: the one way a route's partition
// count changes (FM31, RUNBOOK "Growing a topic's partitions").
func runRoutes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "usage: fencegate routes set-partitions --config F --pattern P --partitions N   record a route's new partition count\n" +
		"fencegate routes set-partitions -h lists the flags."
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stderr, usage)
		return flag.ErrHelp
	}
	if len(args) == 0 || args[0] != "set-partitions" {
		return usagef(usage)
	}
	var f routesFlags
	fs := flagSet("routes set-partitions", stderr)
	f.register(fs)
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if f.configPath == "" || f.pattern == "" || f.partitions < 1 || fs.NArg() > 0 {
		return usagef(usage)
	}
	p, err := setPartitions(ctx, f)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "route %q: placement version %d recorded: topic %s, %d partitions; "+
		"now set partitions: %d in the config and restart serve and materialize\n", p.Pattern, p.Version, p.Topic, p.Partitions, p.Partitions)
	return nil
}

// setPartitions records a route's new partition count once the topic has
// it, no lease of the route is live and the ledger has read every
// partition of the topic to its last stable offset; it refuses otherwise
// (errRefused).
func setPartitions(ctx context.Context, f routesFlags) (leasestore.Placement, error) {
	route, router, err := configRoute(f.configPath, f.pattern)
	if err != nil {
		return leasestore.Placement{}, err
	}
	n := int32(f.partitions)
	conn := f.kafkaConn()
	if err := conn.Validate(); err != nil {
		return leasestore.Placement{}, err
	}
	if has, err := topicPartitions(ctx, conn, route.Topic); err != nil || has != n {
		return leasestore.Placement{}, errors.Join(err, refusedf("topic %s has %d partitions, not %d: grow the topic first", route.Topic, has, n))
	}
	pool, err := openPool(ctx, f.databaseURL, 2)
	if err != nil {
		return leasestore.Placement{}, err
	}
	defer pool.Close()
	store, err := leasestore.New(pool, leasestore.Config{ValidateName: txnmap.ValidateName})
	if err != nil {
		return leasestore.Placement{}, err
	}
	if err := noLiveLeases(ctx, store, route.Pattern); err != nil {
		return leasestore.Placement{}, err
	}
	if err := noOpenTransactions(ctx, conn, router, route, n); err != nil {
		return leasestore.Placement{}, err
	}
	if err := ledgerCaughtUp(ctx, f, route.Topic, n); err != nil {
		return leasestore.Placement{}, err
	}
	return store.RecordPlacement(ctx, route.Pattern, route.Topic, n)
}

func refusedf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errRefused, fmt.Sprintf(format, args...))
}

// configRoute returns the route of the config whose pattern is pattern,
// and the config's router.
func configRoute(path, pattern string) (txnmap.Route, *txnmap.Router, error) {
	_, router, err := fileconfig.Load(path)
	if err != nil {
		return txnmap.Route{}, nil, err
	}
	for _, r := range router.Routes() {
		if r.Pattern == pattern {
			return r, router, nil
		}
	}
	return txnmap.Route{}, nil, fmt.Errorf("no route with pattern %q in %s", pattern, path)
}

// noLiveLeases refuses while a lease matching pattern is live: its
// generation's barrier named the old placement and its worker may still
// write.
func noLiveLeases(ctx context.Context, store *leasestore.Store, pattern string) error {
	names, err := store.LiveNames(ctx)
	if err != nil {
		return err
	}
	var live []string
	for _, n := range names {
		if txnmap.Match(pattern, n) {
			live = append(live, n)
		}
	}
	if len(live) > 0 {
		return refusedf("%d leases of route %q are live (%s); release them or let them expire, then run again",
			len(live), pattern, strings.Join(live[:min(len(live), 5)], ", "))
	}
	return nil
}

// noOpenTransactions refuses while a transaction of a lease of route is
// open on a partition of its topic (FM83): a generation whose lease is no
// longer live but whose replica paused mid-commit would commit on the old
// partition after the move, below no ledger position the move was
// judged by, and checkpoint finality (docs/design.md, "Checkpoints")
// would no longer hold. A transaction whose transactional id the cluster
// does not name to this principal may be the route's: refused too (fail
// closed; the operator principal needs Describe on the transactional ids).
func noOpenTransactions(ctx context.Context, conn kafkaconn.Config, router *txnmap.Router, route txnmap.Route, partitions int32) error {
	open, err := conn.OpenTransactions(ctx, route.Topic, partitions)
	if err != nil {
		return err
	}
	for _, o := range open {
		if o.TransactionalID == "" {
			return refusedf("producer id %d has a transaction open on %s/%d whose transactional id this principal may not describe; "+
				"grant it Describe on the transactional ids, or wait for the transaction to end, then run again", o.ProducerID, route.Topic, o.Partition)
		}
		name, err := txnmap.LeaseName(router.Prefix(), o.TransactionalID)
		if err != nil {
			continue // not a lease's: another application's transaction
		}
		if pattern, _ := router.PatternOf(name); pattern == route.Pattern {
			return refusedf("lease %s of route %q has a transaction open on %s/%d (a replica paused mid-commit?); "+
				"wait for it to commit or abort (at most the transaction timeout), let the ledger read it, then run again", name, route.Pattern, route.Topic, o.Partition)
		}
	}
	return nil
}

// qLedgerPositions reads the ledger's next offset per partition of a
// topic (materializer/schema, consumer_positions).
const qLedgerPositions = `SELECT partition, next_offset FROM consumer_positions WHERE topic = $1`

// ledgerCaughtUp refuses while the ledger has not applied some partition
// of topic up to its last stable offset: what it has not read yet it
// would judge under the new config.
func ledgerCaughtUp(ctx context.Context, f routesFlags, topic string, partitions int32) error {
	lso, err := f.kafkaConn().LastStableOffsets(ctx, topic, partitions)
	if err != nil {
		return err
	}
	next, err := ledgerPositions(ctx, cmp.Or(f.ledgerURL, f.databaseURL), topic)
	if err != nil {
		return fmt.Errorf("ledger positions (the database of `materialize`; --ledger-database-url): %w", err)
	}
	for p, end := range lso {
		if next[int32(p)] < end {
			return refusedf("the ledger is behind on %s/%d (at offset %d of %d); let `fencegate materialize` catch up, then run again",
				topic, p, next[int32(p)], end)
		}
	}
	return nil
}

// ledgerPositions returns the ledger's next offset per partition of
// topic; a partition never applied is absent (0).
func ledgerPositions(ctx context.Context, url, topic string) (map[int32]int64, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, qLedgerPositions, topic)
	if err != nil {
		return nil, err
	}
	next := map[int32]int64{}
	var p int32
	var off int64
	_, err = pgx.ForEachRow(rows, []any{&p, &off}, func() error { next[p] = off; return nil })
	return next, err
}
