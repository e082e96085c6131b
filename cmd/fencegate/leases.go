package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/leasestore"
)

// leasesUsage lists the subcommands of leases.
const leasesUsage = `usage: fencegate leases list [flags]        every lease (--prefix P: those whose name starts with P)
       fencegate leases show [flags] NAME   one lease and its last events
       fencegate leases watch [flags]       lease events as they happen (--prefix P), until interrupted
       fencegate leases prune-events [flags] delete lease events older than --older-than (default 168h)
fencegate leases SUBCOMMAND -h lists the flags.`

// DefaultEventRetention is the default of `leases prune-events
// --older-than`: a week of transitions, for an incident looked at after
// a weekend.
const DefaultEventRetention = 7 * 24 * time.Hour

// runLeases is the operator view: `leases list [--prefix P]` and
// `leases show NAME`, against a gateway URL; `-o json` prints the
// gateway's JSON. Flags may come before or after the lease name. None of
// its flags reads the environment but the secret --token.
func runLeases(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stderr, leasesUsage)
		return flag.ErrHelp
	}
	if len(args) > 0 && args[0] == "prune-events" {
		return runPruneEvents(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "list" && args[0] != "show" && args[0] != "watch" {
		return usagef("%s", leasesUsage)
	}
	fs := flagSet("leases "+args[0], stderr)
	gw := fs.String("gateway", "http://"+defaultListen, "gateway URL")
	token := new(string)
	*token = devToken
	secretVar(fs, token, "token", "bearer token (default dev-token, the development token)")
	output := fs.String("o", "table", "output: table or json")
	var prefix *string
	want := 1
	switch args[0] {
	case "list":
		prefix, want = fs.String("prefix", "", "list only the leases whose name starts with this"), 0
	case "watch":
		prefix, want = fs.String("prefix", "", "watch only the leases whose name starts with this"), 0
	default:
		fs.args = "NAME"
	}
	names, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return usagef("-o must be table or json, not %q", *output)
	}
	if len(names) != want {
		return usagef("%s", leasesUsage)
	}
	c := &opClient{base: *gw, token: *token, json: *output == "json"}
	switch args[0] {
	case "list":
		return c.list(ctx, stdout, *prefix)
	case "watch":
		return c.watch(ctx, stdout, *prefix)
	}
	return c.show(ctx, stdout, names[0])
}

// parseInterspersed parses flags that may come before or after the
// positional arguments, and returns the positional ones.
func parseInterspersed(fs *cmdFlags, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

type opClient struct {
	base, token string
	json        bool // print the gateway's JSON instead of a table
}

// get is call for a GET: the gateway's JSON decoded into out.
func (c *opClient) get(ctx context.Context, path string, out any) error {
	return c.call(ctx, http.MethodGet, path, nil, out)
}

// list prints every lease under prefix, following the pages' next cursor.
func (c *opClient) list(ctx context.Context, w io.Writer, prefix string) error {
	var out gateway.LeasePage
	for after := ""; ; {
		var page gateway.LeasePage
		if err := c.get(ctx, "/v1/leases?prefix="+url.QueryEscape(prefix)+"&after="+url.QueryEscape(after), &page); err != nil {
			return err
		}
		out.Leases = append(out.Leases, page.Leases...)
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if c.json {
		return printJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTOKEN\tOWNER\tSTATE\tLIVE\tEXPIRES\tHOLDER\tPRODUCER_ID\tEPOCH")
	for _, l := range out.Leases {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%t\t%s\t%s\t%d\t%d\n", l.Name, l.Token, l.OwnerID, l.State, l.Live,
			l.ExpiresAt.Format(time.RFC3339Nano), l.Holder, l.ProducerID, l.ProducerEpoch)
	}
	return tw.Flush()
}

func (c *opClient) show(ctx context.Context, w io.Writer, name string) error {
	var l gateway.LeaseView
	if err := c.get(ctx, "/v1/leases/"+url.PathEscape(name), &l); err != nil {
		return err
	}
	if c.json {
		return printJSON(w, l)
	}
	fmt.Fprintf(w, "name:        %s\ntoken:       %d\nowner:       %s\nstate:       %s (live: %t)\nexpires:     %s\n"+
		"holder:      %s\nproducer_id: %d\nepoch:       %d\n\nlast events (newest first):\n",
		l.Name, l.Token, l.OwnerID, l.State, l.Live, l.ExpiresAt.Format(time.RFC3339Nano), l.Holder, l.ProducerID, l.ProducerEpoch)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tKIND\tTOKEN\tOWNER\tHOLDER\tEPOCH")
	for _, e := range l.Events {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\n", e.At.Format(time.RFC3339Nano), e.Kind, e.Token, e.OwnerID, e.Holder, e.ProducerEpoch)
	}
	return tw.Flush()
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// watch prints the events of the leases under prefix as they come, one
// line each (like kubectl get -w), or one JSON object a line with -o
// json, until ctx ends (an interrupt): the stream is reopened with
// Last-Event-ID after a break, so no event is printed twice or skipped.
func (c *opClient) watch(ctx context.Context, w io.Writer, prefix string) error {
	cl, err := client.New(client.Config{BaseURL: c.base, Token: c.token, Owner: "fencegate-cli"})
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !c.json {
		fmt.Fprintln(tw, "ID\tAT\tKIND\tNAME\tTOKEN\tOWNER\tHOLDER")
		_ = tw.Flush()
	}
	err = cl.Watch(ctx, prefix, -1, func(e client.Event) error {
		if c.json {
			return enc.Encode(e)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", e.ID, e.At.Format(time.RFC3339Nano), e.Kind, e.Name, e.Token, e.OwnerID, e.Holder)
		return tw.Flush()
	})
	if ctx.Err() != nil {
		return nil // interrupted: the normal end
	}
	return err
}

// runPruneEvents deletes the lease events older than --older-than from
// the lease store (docs/RUNBOOK.md, "Lease events").
func runPruneEvents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("leases prune-events", stderr)
	var dbURL *string
	fs.settingsOf(func() { dbURL = fs.String("database-url", defaultDatabaseURL, "Postgres URL of the lease store") })
	age := fs.Duration("older-than", DefaultEventRetention, "delete the events older than this (database time)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *age <= 0 {
		return usagef("--older-than must be positive, not %s", *age)
	}
	pool, err := openPool(ctx, *dbURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := leasestore.New(pool, leasestore.Config{})
	if err != nil {
		return err
	}
	n, err := st.PruneEvents(ctx, *age)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %d lease events older than %s\n", n, *age)
	return nil
}
