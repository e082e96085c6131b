package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencegate/fencegate/brokercheck"
	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/txnmap"
)

// registerTxnTimeout registers --transaction-timeout, the same for serve
// and verify-broker.
func registerTxnTimeout(fs *cmdFlags, p *time.Duration) {
	fs.DurationVar(p, "transaction-timeout", gateway.DefaultTransactionTimeout, "transaction.timeout.ms of producers; keep below the TTLs in use")
}

// registerParkAfter registers --park-after, the same for serve and
// verify-broker.
func registerParkAfter(fs *cmdFlags, p *time.Duration) {
	fs.DurationVar(p, "park-after", gateway.DefaultParkAfter, "close the producer of a session that has had no batch this long; "+
		"the session stays and renews, its next batch is answered not_holder and the worker resumes it as a new generation (0: never park)")
}

// verifyBrokerFlags are verify-broker's: serve's connection, config,
// transaction timeout and parking, and the run's own.
type verifyBrokerFlags struct {
	commonFlags
	txnTimeout   time.Duration
	parkAfter    time.Duration
	output       string
	scratchTopic string
	timeout      time.Duration
}

// defaultVerifyTimeout bounds a verify-broker run; a healthy cluster
// answers in a few seconds.
const defaultVerifyTimeout = 2 * time.Minute

func (f *verifyBrokerFlags) register(fs *cmdFlags) {
	fs.settingsOf(func() {
		fs.StringVar(&f.brokers, "kafka-brokers", defaultKafkaBrokers, "Kafka bootstrap servers")
		f.registerKafka(fs, "gateway")
		fs.StringVar(&f.configPath, "config", "", "routes and clients YAML file of the deployment, as serve's (required): its route topics and transactional_id_prefix")
		registerTxnTimeout(fs, &f.txnTimeout)
		registerParkAfter(fs, &f.parkAfter)
	})
	fs.StringVar(&f.output, "o", "table", "output: table or json")
	fs.StringVar(&f.scratchTopic, "scratch-topic", "", "an existing topic the fence checks write to and never create or delete "+
		"(for a principal without Create); empty: a topic "+brokercheck.ScratchTopicPrefix+"<run id> of the run's own, deleted after")
	fs.DurationVar(&f.timeout, "timeout", defaultVerifyTimeout, "give up after this long (exit 2)")
}

func runVerifyBroker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f verifyBrokerFlags
	fs := flagSet("verify-broker", stderr)
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if f.output != "table" && f.output != "json" {
		return usagef("-o %q: table or json", f.output)
	}
	if err := f.requireConfig("verify-broker"); err != nil {
		return usageError{err: err}
	}
	raw, err := f.readConfig()
	if err != nil {
		return usageError{err: err}
	}
	_, router, err := fileconfig.Parse(raw)
	if err != nil {
		return usageError{err: err}
	}
	conn := f.kafkaConn()
	if err := conn.Validate(); err != nil {
		return usageError{err: err}
	}
	cfg := brokerConfig(conn, router, f.txnTimeout, f.parkAfter)
	cfg.ScratchTopic = f.scratchTopic
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	rep := brokercheck.Verify(ctx, cfg)
	if f.output == "json" {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		return err
	}
	switch rep.ExitCode() {
	case brokercheck.ExitFail:
		return exitError{code: 1, err: fmt.Errorf("%d check(s) failed", rep.Count(brokercheck.Fail))}
	case brokercheck.ExitCouldNotRun:
		return exitError{code: 2, err: fmt.Errorf("%d check(s) could not run", rep.Count(brokercheck.Error))}
	}
	return nil
}

// brokerConfig is what brokercheck judges the cluster against: the
// routes' topics and the gateway's settings, for verify-broker and serve
// alike.
func brokerConfig(conn kafkaconn.Config, router *txnmap.Router, txnTimeout, parkAfter time.Duration) brokercheck.Config {
	var topics []string
	for _, r := range router.Routes() {
		if !slices.Contains(topics, r.Topic) {
			topics = append(topics, r.Topic)
		}
	}
	return brokercheck.Config{Conn: conn, Topics: topics, TransactionTimeout: txnTimeout, ParkAfter: parkAfter, Prefix: router.Prefix()}
}

// checkBroker reads the broker's settings at start (brokercheck.Settings)
// and refuses a setting that breaks the fence unless --allow-unsafe-broker
// names it; every other finding is logged at WARN. It returns the names
// of the refusals overridden. A cluster not reachable is only logged, as
// probeKafka does.
func (f *serveFlags) checkBroker(ctx context.Context, conn kafkaconn.Config, router *txnmap.Router, reachable bool, log *slog.Logger) ([]string, error) {
	allowed, err := brokercheck.ParseAllowed(f.allowUnsafe)
	if err != nil {
		return nil, usageError{err: fmt.Errorf("--allow-unsafe-broker: %w", err)}
	}
	if !reachable {
		log.Warn("broker settings not checked: kafka not reachable; run fencegate verify-broker")
		return nil, nil
	}
	cctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	results, err := brokercheck.Settings(cctx, brokerConfig(conn, router, f.txnTimeout, f.parkAfter))
	if errors.Is(err, kafkaconn.ErrHandshake) {
		return nil, err
	}
	if err != nil {
		log.Warn("broker settings not checked; run fencegate verify-broker", "error", err)
		return nil, nil
	}
	refused, overridden := brokercheck.Refused(results, allowed)
	for _, r := range results {
		if r.Status == brokercheck.Warn || r.Status == brokercheck.Fail && r.Unsafe == "" {
			log.Warn("broker check: "+r.Check, "subject", r.Subject, "status", r.Status, "evidence", r.Evidence, "fix", r.Fix)
		}
	}
	var names []string
	for _, r := range overridden {
		log.Warn("unsafe broker setting allowed by --allow-unsafe-broker: the fence may not hold", "unsafe", r.Unsafe,
			"check", r.Check, "subject", r.Subject, "evidence", r.Evidence, "fix", r.Fix)
		if !slices.Contains(names, r.Unsafe) {
			names = append(names, r.Unsafe)
		}
	}
	if len(refused) > 0 {
		return nil, &brokercheck.RefusalError{Refused: refused}
	}
	return names, nil
}

// exportUnsafeAllowed exports fencegate.broker.unsafe_allowed: 1 for
// each refusal the operator overrode at start, 0 for the others.
func exportUnsafeAllowed(mp metric.MeterProvider, allowed []string) error {
	m := mp.Meter("github.com/fencegate/fencegate/cmd/fencegate")
	_, err := m.Int64ObservableGauge("fencegate.broker.unsafe_allowed", metric.WithUnit("{setting}"),
		metric.WithDescription("1 for each broker setting that breaks the fence which serve started on because --allow-unsafe-broker named it"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for _, n := range brokercheck.UnsafeNames() {
				v := int64(0)
				if slices.Contains(allowed, n) {
					v = 1
				}
				o.Observe(v, metric.WithAttributes(attribute.String("setting", n)))
			}
			return nil
		}))
	return err
}
