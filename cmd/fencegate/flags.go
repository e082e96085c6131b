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
