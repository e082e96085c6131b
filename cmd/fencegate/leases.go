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

// runLeases is the operator view: `leases list [--prefix P]` and
// `leases show NAME`, against a gateway URL; `-o json` prints the
// gateway's JSON. Flags may come before or after the lease name.
func runLeases(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "list" && args[0] != "show" {
		return usagef("usage: fencegate leases list [--prefix P] [-o table|json] | leases show NAME [-o table|json]")
	}
	fs := flagSet("leases "+args[0], stderr)
	gw := fs.String("gateway", "http://"+defaultListen, "gateway URL")
	token := new(string)
	*token = devToken
	secretVar(fs, token, "token", "bearer token (default dev-token, the development token)")
	prefix := fs.String("prefix", "", "lease name prefix (list)")
	output := fs.String("o", "table", "output: table or json")
	names, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return usagef("-o must be table or json, not %q", *output)
	}
	c := &opClient{base: *gw, token: *token, json: *output == "json"}
	switch {
	case args[0] == "list" && len(names) == 0:
		return c.list(ctx, stdout, *prefix)
	case args[0] == "show" && len(names) == 1:
		return c.show(ctx, stdout, names[0])
	}
	return usagef("usage: fencegate leases list [--prefix P] [-o table|json] | leases show NAME [-o table|json]")
}

// parseInterspersed parses flags that may come before or after the
// positional arguments, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
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

func (c *opClient) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %s", path, resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
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
