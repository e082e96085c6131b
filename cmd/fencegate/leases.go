package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

// runLeases is the operator view: `leases list [--prefix P]` and
// `leases show NAME`, against a gateway URL.
func runLeases(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: fencegate leases list [--prefix P] | show NAME")
	}
	fs := flagSet("leases "+args[0], stderr)
	gw := fs.String("gateway", "http://127.0.0.1:8080", "gateway URL")
	token := new(string)
	*token = "dev-token"
	secretVar(fs, token, "token", "bearer token (default dev-token, the development token)")
	prefix := fs.String("prefix", "", "lease name prefix (list)")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	c := &opClient{base: *gw, token: *token}
	switch args[0] {
	case "list":
		return c.list(ctx, stdout, *prefix)
	case "show":
		if fs.NArg() != 1 {
			return errors.New("usage: fencegate leases show NAME")
		}
		return c.show(ctx, stdout, fs.Arg(0))
	}
	return fmt.Errorf("unknown leases command %q", args[0])
}

type opClient struct{ base, token string }

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

func (c *opClient) list(ctx context.Context, w io.Writer, prefix string) error {
	var out struct {
		Leases []gateway.LeaseView `json:"leases"`
	}
	if err := c.get(ctx, "/v1/leases?prefix="+url.QueryEscape(prefix), &out); err != nil {
		return err
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
