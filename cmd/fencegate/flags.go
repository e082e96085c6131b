package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/kafkaconn"
)

// cmdFlags is the flag set of one command and which of its flags are
// settings.
//
// The rule for the environment: a setting (how a component runs: every
// flag of serve, materialize, dev and migrate, the database, Kafka
// and config flags of routes set-partitions, and verify-broker's Kafka,
// config, transaction-timeout and park-after flags) reads FENCEGATE_<NAME>
// (dashes become underscores) when it is set, and the command line wins
// over it. A flag that picks output or what to act on (version --json,
// the flags of leases, routes --pattern and --partitions, the flags of
// the harness) reads no variable, so a FENCEGATE_JSON left in a shell
// cannot reach it. A secret reads its variable only (secretVar). -h
// shows each flag's variable in [ ]; a variable that does not parse fails
// naming itself and its flag.
type cmdFlags struct {
	*flag.FlagSet
	// args names the positional arguments in the usage line ("NAME").
	args     string
	settings map[string]bool
}

// flagSet returns the flag set of command name; a flag is a setting only
// when registered within settingsOf.
func flagSet(name string, stderr io.Writer) *cmdFlags {
	fs := &cmdFlags{FlagSet: flag.NewFlagSet("fencegate "+name, flag.ContinueOnError), settings: map[string]bool{}}
	fs.SetOutput(stderr)
	fs.Usage = fs.printUsage
	return fs
}

// settingsOf marks the flags that register registers as settings.
func (fs *cmdFlags) settingsOf(register func()) {
	before := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { before[f.Name] = true })
	register()
	fs.VisitAll(func(f *flag.Flag) {
		if !before[f.Name] {
			fs.settings[f.Name] = true
		}
	})
}

// envSource is where flag f may come from besides the command line, as
// -h shows it: its variable, its variable only (a secret), or nothing.
func (fs *cmdFlags) envSource(f *flag.Flag) string {
	switch {
	case isSecret(f):
		return " [" + envName(f.Name) + " only; refused on the command line]"
	case fs.settings[f.Name]:
		return " [" + envName(f.Name) + "]"
	}
	return ""
}

// printUsage lists every flag with its default and the environment
// variable that sets it, if any.
func (fs *cmdFlags) printUsage() {
	w := fs.Output()
	fmt.Fprintf(w, "usage: %s [flags]", fs.Name())
	if fs.args != "" {
		fmt.Fprintf(w, " %s", fs.args)
	}
	fmt.Fprintln(w)
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		if isSecret(f) {
			kind = "string" // flag names every Value type "value"
		}
		if kind != "" {
			kind = " " + kind
		}
		fmt.Fprintf(w, "  -%s%s\n    \t%s", f.Name, kind, usage)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n", fs.envSource(f))
	})
	fmt.Fprintln(w, "A flag marked [FENCEGATE_<NAME>] also takes its value from that variable (the command line wins; "+
		"a secret's comes from it only); a flag without a mark (output, selection) reads no variable.")
}

// usageError is a command line the command cannot run: exit status 2.
// printed says the flag package already wrote it (with the usage).
type usageError struct {
	err     error
	printed bool
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef is a usage error to print once.
func usagef(format string, args ...any) error {
	return usageError{err: fmt.Errorf(format, args...)}
}

// envName is the environment variable of flag name.
func envName(name string) string {
	return "FENCEGATE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// parse applies the environment to settings and secrets, then the command
// line (which wins).
func parse(fs *cmdFlags, args []string) error {
	if err := fs.fromEnvironment(); err != nil {
		return usageError{err: err}
	}
	if err := refuseSecretArgs(fs, args); err != nil {
		return usageError{err: err}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err: err, printed: true}
	}
	return nil
}

// fromEnvironment sets every setting and secret whose variable is set. A
// value that does not parse names the variable and the flag (a secret's
// Set never fails, so no secret is ever repeated).
func (fs *cmdFlags) fromEnvironment() error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || !fs.settings[f.Name] && !isSecret(f) {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("invalid value %q in %s for flag --%s: %v", v, envName(f.Name), f.Name, serr)
		}
	})
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Defaults the commands share: the brokers of every command (and the
// listener of dev's embedded broker), the gateway's listener (and the URL
// the leases command asks), and the materializer's.
const (
	defaultKafkaBrokers       = "127.0.0.1:9092"
	defaultListen             = "127.0.0.1:8080"
	defaultMaterializerListen = "127.0.0.1:8081"
)

// commonFlags are the settings gateway and materializer share.
type commonFlags struct {
	databaseURL string
	brokers     string
	// kafka holds the connection settings other than the brokers; its
	// SASLPassword comes from FENCEGATE_KAFKA_SASL_PASSWORD only.
	kafka        kafkaconn.Config
	saslMech     string
	saslUser     string
	saslPassword string
	configPath   string
	// barrierKey is FENCEGATE_BARRIER_KEY (never argv): one key, or a
	// comma-separated list whose first key signs and every key verifies.
	barrierKey     string
	barrierKeyFile string
	migrate        bool
	logJSON        bool
	// dev is set by `fencegate dev` only (no flag): it alone may run on
	// the public development key and token (FM45).
	dev bool
	// leaseMetrics exports per-lease series (lease names and tokens) on
	// the unauthenticated /metrics, for at most leaseMetricsLimit leases.
	leaseMetrics      bool
	leaseMetricsLimit int
}

func (f *commonFlags) register(fs *cmdFlags, principal string) {
	fs.settingsOf(func() {
		fs.StringVar(&f.databaseURL, "database-url", defaultDatabaseURL, "Postgres URL")
		fs.StringVar(&f.brokers, "kafka-brokers", defaultKafkaBrokers, "Kafka bootstrap servers")
		f.registerKafka(fs, principal)
		fs.StringVar(&f.configPath, "config", "", "routes and clients YAML file of this deployment (required; only fencegate dev runs without one, on its built-in development file)")
		secretVar(fs, &f.barrierKey, "barrier-key", "HMAC key of generation barriers, >= 16 bytes, shared by gateway and materializer; "+
			"a comma-separated list signs with the first and verifies with any (rotation)")
		fs.StringVar(&f.barrierKeyFile, "barrier-key-file", "", "file holding the barrier key(s), one a line, the signing key first")
		fs.BoolVar(&f.migrate, "migrate", false, "apply database migrations at start")
		fs.BoolVar(&f.logJSON, "log-json", false, "log JSON instead of text")
		fs.BoolVar(&f.leaseMetrics, "lease-metrics", false, "export per-lease series (lease names and tokens) on /metrics, which needs no credentials: "+
			"only where every scraper may see every lease (docs/observability.md)")
		fs.IntVar(&f.leaseMetricsLimit, "lease-metrics-limit", telemetry.DefaultLeaseSeriesLimit,
			"with --lease-metrics, the most leases exported as series (the first by name; the others are counted in *_series_omitted)")
	})
}

// registerKafka registers the Kafka connection flags other than the
// brokers (docs/security.md); they are settings where the caller
// registers them within settingsOf.
func (f *commonFlags) registerKafka(fs *cmdFlags, principal string) {
	fs.StringVar(&f.kafka.SecurityProtocol, "kafka-security-protocol", "",
		"PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (empty: SASL_PLAINTEXT with a SASL mechanism, else PLAINTEXT)")
	fs.StringVar(&f.saslMech, "kafka-sasl-mechanism", "", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (empty: no SASL)")
	fs.StringVar(&f.saslUser, "kafka-sasl-user", "", "SASL user of the "+principal+" principal (OAUTHBEARER: its OAuth client id)")
	secretVar(fs, &f.saslPassword, "kafka-sasl-password", "SASL password (OAUTHBEARER: the OAuth client secret)")
	fs.StringVar(&f.kafka.SASLPasswordFile, "kafka-sasl-password-file", "", "file holding the SASL password or OAuth client secret (read at every client start, so a rotated file is picked up)")
	fs.StringVar(&f.kafka.OAuthTokenURL, "kafka-oauth-token-url", "", "OAUTHBEARER: the identity provider's token endpoint (OIDC client credentials)")
	fs.StringVar(&f.kafka.OAuthScope, "kafka-oauth-scope", "", "OAUTHBEARER: the scope asked with each token (empty: none)")
	fs.StringVar(&f.kafka.CAFile, "kafka-ca-file", "", "PEM CAs of the brokers' certificates (SSL, SASL_SSL; empty: system roots)")
	fs.StringVar(&f.kafka.CertFile, "kafka-cert-file", "", "PEM client certificate for mutual TLS with the brokers")
	fs.StringVar(&f.kafka.KeyFile, "kafka-key-file", "", "PEM key (unencrypted) of --kafka-cert-file")
}

// kafkaConn is the Kafka connection of the flags.
func (f *commonFlags) kafkaConn() kafkaconn.Config {
	c := f.kafka
	c.Brokers, c.SASLMechanism, c.SASLUser, c.SASLPassword = f.brokers, f.saslMech, f.saslUser, f.saslPassword
	return c
}

// requireConfig refuses to run a long-lived component on a config nobody
// chose: the development file allows every lease to a well-known token.
func (f *commonFlags) requireConfig(cmd string) error {
	if f.configPath == "" && !f.dev {
		return fmt.Errorf("no --config (or FENCEGATE_CONFIG): %s needs the routes and clients file of this deployment; "+
			"only `fencegate dev` runs on the development file", cmd)
	}
	return nil
}

// readConfig returns the routes and clients file: --config, or, for
// `fencegate dev` without one, the development file built into the
// binary, so that dev runs from any directory.
func (f *commonFlags) readConfig() ([]byte, error) {
	if f.configPath == "" && f.dev {
		return devConfigYAML, nil
	}
	return os.ReadFile(f.configPath)
}

// barrierKeys returns the signing key and the keys that only verify. The
// keys come from FENCEGATE_BARRIER_KEY (comma-separated) or
// --barrier-key-file (one a line), never both.
//
// It refuses a key everyone can read (FM45): the development key outside
// `fencegate dev`, and a placeholder of the deployment examples
// ("REPLACE-..."), whichever position it holds (a verify-only key
// accepts every barrier signed with it). A key file readable by group or
// others is logged at WARN with its path and mode.
func (f *commonFlags) barrierKeys(log *slog.Logger) ([]byte, [][]byte, error) {
	raw, sep := f.barrierKey, ","
	if f.barrierKeyFile != "" {
		if f.barrierKey != "" {
			return nil, nil, errors.New("barrier key given both in FENCEGATE_BARRIER_KEY and as --barrier-key-file; give one")
		}
		b, err := os.ReadFile(f.barrierKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("barrier key file: %w", err)
		}
		warnReadableKeyFile(f.barrierKeyFile, log)
		raw, sep = string(b), "\n"
	}
	var keys [][]byte
	for _, k := range strings.Split(raw, sep) {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, []byte(k))
		}
	}
	if len(keys) == 0 {
		return nil, nil, errors.New("no barrier key: set FENCEGATE_BARRIER_KEY or --barrier-key-file (at least 16 bytes, the same for gateway and materializer)")
	}
	for i, k := range keys {
		if err := f.refusePublicKey(string(k)); err != nil {
			return nil, nil, fmt.Errorf("barrier key %d of %d: %w", i+1, len(keys), err)
		}
	}
	return keys[0], keys[1:], nil
}

// placeholderPrefix starts every placeholder of the deployment examples
// (deploy/helm/secret.example.yaml: REPLACE-with-openssl-rand-hex-32).
const placeholderPrefix = "REPLACE"

// refusePublicKey refuses a barrier key that is public: anyone holding it
// signs barriers the materializer accepts. The error never repeats a key.
func (f *commonFlags) refusePublicKey(k string) error {
	switch {
	case k == devBarrierKey && !f.dev:
		return errors.New("it is the development barrier key, public in the source; only `fencegate dev` runs on it: " +
			"make a key with `openssl rand -hex 32` (docs/security.md)")
	case strings.HasPrefix(strings.ToUpper(k), placeholderPrefix):
		return errors.New("it is a placeholder of the deployment examples (REPLACE-...), not a key: " +
			"make one with `openssl rand -hex 32` (docs/security.md)")
	}
	return nil
}

// warnReadableKeyFile logs a key file that users other than its owner
// may read: each of them can sign barriers. Kubernetes (0440 with
// fsGroup) and compose (0644 inside the 0700 secrets/) ship such modes on
// purpose, and the warning says so.
func warnReadableKeyFile(path string, log *slog.Logger) {
	warnReadable(path, "barrier key file", "sign barriers", log)
}

// warnReadable logs a secret file (what) that users other than its owner
// may read, saying what each of them can then do.
func warnReadable(path, what, can string, log *slog.Logger) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o044 == 0 {
		return
	}
	log.Warn(what+" is readable by group or others: every user who can read it can "+can+"; "+
		"make it 0600 (or 0400), or make sure its directory or group admits this service only",
		"path", path, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
}

// secret is a string flag that takes its value from the environment
// (FENCEGATE_<NAME>) only: argv is readable by every user of the machine
// in /proc/<pid>/cmdline and lands in shell histories. Its value is never
// printed.
type secret struct{ p *string }

func (s secret) String() string { return "" }

func (s secret) Set(v string) error { *s.p = v; return nil }

func secretVar(fs *cmdFlags, p *string, name, usage string) {
	fs.Var(secret{p}, name, usage)
}

func isSecret(f *flag.Flag) bool {
	_, ok := f.Value.(secret)
	return ok
}

// refuseSecretArgs fails when a secret flag is on the command line. The
// error names the flag, never the value.
func refuseSecretArgs(fs *cmdFlags, args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name == "" {
			continue
		}
		if fl := fs.Lookup(name); fl != nil && isSecret(fl) {
			return fmt.Errorf("--%s is refused on the command line (every user can read it in /proc/<pid>/cmdline); "+
				"set %s or use --%s-file", name, envName(name), name)
		}
	}
	return nil
}
