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

	"github.com/fencegate/fencegate/gateway"
)

// leasesUsage lists the subcommands of leases.
const leasesUsage = `usage: fencegate leases list [flags]        every lease (--prefix P: those whose name starts with P)
       fencegate leases show [flags] NAME   one lease and its last events
fencegate leases list -h and fencegate leases show -h list the flags.`

// runLeases is the operator view: `leases list [--prefix P]` and
// `leases show NAME`, against a gateway URL; `-o json` prints the
// gateway's JSON. Flags may come before or after the lease name. None of
// its flags reads the environment but the secret --token.
func runLeases(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stderr, leasesUsage)
		return flag.ErrHelp
	}
	if len(args) == 0 || args[0] != "list" && args[0] != "show" {
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
	if args[0] == "list" {
		prefix, want = fs.String("prefix", "", "list only the leases whose name starts with this"), 0
	} else {
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
	if args[0] == "list" {
		return c.list(ctx, stdout, *prefix)
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
