package main

import (
	"flag"
	"io"
	"os"
	"sort"
	"strings"
)

// flagSet returns a FlagSet whose flags default to FENCEGATE_<NAME>
// environment variables (dashes become underscores) when set.
func flagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("fencegate "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// envName is the environment variable that sets flag name.
func envName(name string) string {
	return "FENCEGATE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// parse applies environment defaults, then the command line (which wins).
func parse(fs *flag.FlagSet, args []string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(envName(f.Name)); ok && err == nil {
			err = fs.Set(f.Name, v)
		}
	})
	if err != nil {
		return err
	}
	return fs.Parse(args)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// commonFlags are the settings gateway and materializer share.
type commonFlags struct {
	databaseURL  string
	brokers      string
	saslMech     string
	saslUser     string
	saslPassword string
	configPath   string
	barrierKey   string
	migrate      bool
	logJSON      bool
}

func (f *commonFlags) register(fs *flag.FlagSet, principal string) {
	fs.StringVar(&f.databaseURL, "database-url", defaultDatabaseURL, "Postgres URL")
	fs.StringVar(&f.brokers, "kafka-brokers", "127.0.0.1:9092", "Kafka bootstrap servers")
	fs.StringVar(&f.saslMech, "kafka-sasl-mechanism", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
	fs.StringVar(&f.saslUser, "kafka-sasl-user", "", "SASL user of the "+principal+" principal")
	fs.StringVar(&f.saslPassword, "kafka-sasl-password", "", "SASL password")
	fs.StringVar(&f.configPath, "config", "deploy/dev/fencegate.yaml", "routes and clients YAML file")
	fs.StringVar(&f.barrierKey, "barrier-key", "", "HMAC key of generation barriers, >= 16 bytes, shared by gateway and materializer (required)")
	fs.BoolVar(&f.migrate, "migrate", false, "apply database migrations at start")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON instead of text")
}
