package main

import (
	"bytes"
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
	"github.com/fencegate/fencegate/rollout"
)

// rolloutUsage lists the subcommands of rollout.
const rolloutUsage = `usage: fencegate rollout status [flags] [PATTERN]   where each route pattern stands
       fencegate rollout observe [flags] PATTERN   direct clients acquire; the ledger keeps what it would refuse
       fencegate rollout gate [flags] PATTERN      direct clients are refused; their leases lapse within one TTL
       fencegate rollout enforce [flags] PATTERN   once no direct client holds a lease: the ledger refuses again
fencegate rollout SUBCOMMAND -h lists the flags (docs/RUNBOOK.md, "Rollout").`

// rolloutSteps maps a step subcommand to the state it asks for.
var rolloutSteps = map[string]string{"observe": "observe", "gate": "gated", "enforce": "enforced"}

// rolloutFlags are the settings of `rollout`.
type rolloutFlags struct {
	gateway, token, output, reason string
	force, applyACLs               bool
	kafka                          commonFlags // --apply-acls only
}

// runRollout is `rollout status|observe|gate|enforce` against the
// gateway's admin API (an admin client's token); enforce prints the ACL
// changes it implies and, with --apply-acls, removes them through the
// Kafka admin API with this command's own Kafka flags.
func runRollout(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stderr, rolloutUsage)
		return flag.ErrHelp
	}
	_, step := rolloutSteps[firstArg(args)]
	if !step && firstArg(args) != "status" {
		return usagef("%s", rolloutUsage)
	}
	var f rolloutFlags
	fs := f.register(args[0], stderr, step)
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if f.output != "table" && f.output != "json" {
		return usagef("-o must be table or json, not %q", f.output)
	}
	c := &opClient{base: f.gateway, token: f.token, json: f.output == "json"}
	switch {
	case !step && len(pos) <= 1:
		return c.rolloutStatus(ctx, stdout, append(pos, "")[0])
	case step && len(pos) == 1:
		return c.rolloutStep(ctx, stdout, f, pos[0], rolloutSteps[args[0]])
	}
	return usagef("%s", rolloutUsage)
}

func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

func (f *rolloutFlags) register(sub string, stderr io.Writer, step bool) *cmdFlags {
	fs := flagSet("rollout "+sub, stderr)
	fs.args = "PATTERN"
	fs.StringVar(&f.gateway, "gateway", "http://"+defaultListen, "gateway URL")
	f.token = devToken
	secretVar(fs, &f.token, "token", "bearer token of a client with admin: true (default dev-token, the development token)")
	fs.StringVar(&f.output, "o", "table", "output: table or json")
	if !step {
		return fs
	}
	fs.StringVar(&f.reason, "reason", "", "why, recorded with the change (required with --force)")
	fs.BoolVar(&f.force, "force", false, "take the step although its precondition refuses it (enforce with direct leases live; a skipped gate)")
	if sub == "enforce" {
		fs.BoolVar(&f.applyACLs, "apply-acls", false, "remove the direct clients' Write ACLs on the pattern's topic through the Kafka admin API (the flags below)")
		fs.StringVar(&f.kafka.brokers, "kafka-brokers", defaultKafkaBrokers, "Kafka bootstrap servers (--apply-acls)")
		f.kafka.registerKafka(fs, "operator")
	}
	return fs
}

// call sends a request to the admin API and decodes a 200 into out; any
// other answer is an error with the problem's detail.
func (c *opClient) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return problemError(resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}

// problemError is a refusal of the gateway as the operator reads it.
func problemError(status int, raw []byte) error {
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(raw, &p) != nil || p.Code == "" {
		return fmt.Errorf("%d %s", status, raw)
	}
	if p.Code == string(gateway.CodeRolloutStepRefused) {
		return refusedf("%s", p.Detail)
	}
	return fmt.Errorf("%d %s: %s", status, p.Code, p.Detail)
}

func (c *opClient) rolloutStatus(ctx context.Context, w io.Writer, pattern string) error {
	var page gateway.RolloutPage
	if err := c.call(ctx, http.MethodGet, "/v1/admin/rollouts?pattern="+url.QueryEscape(pattern), nil, &page); err != nil {
		return err
	}
	if c.json {
		return printJSON(w, page)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATTERN\tTOPIC\tSTATE\tVERSION\tCHANGED\tBY\tDIRECT_LEASES\tLAST_LAPSE")
	for _, r := range page.Rollouts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", r.Pattern, r.Topic, r.State, r.Version, when(r.ChangedAt),
			dash(r.ChangedBy), len(r.DirectLeases), when(r.LastLapse))
	}
	return tw.Flush()
}

func (c *opClient) rolloutStep(ctx context.Context, w io.Writer, f rolloutFlags, pattern, state string) error {
	var view gateway.RolloutView
	body := map[string]any{"pattern": pattern, "state": state, "reason": f.reason, "force": f.force}
	if err := c.call(ctx, http.MethodPost, "/v1/admin/rollouts", body, &view); err != nil {
		return err
	}
	if c.json {
		return printJSON(w, view)
	}
	fmt.Fprintf(w, "route %q is %s (version %d); %d lease(s) held by direct clients", view.Pattern, view.State, view.Version, len(view.DirectLeases))
	if view.LastLapse != nil {
		fmt.Fprintf(w, ", the last lapses at %s", view.LastLapse.Format(time.RFC3339))
	}
	fmt.Fprintln(w)
	if state != "enforced" {
		return nil
	}
	return enforceACLs(ctx, w, f, view.ACLPlan)
}

// enforceACLs prints the ACL changes enforce implies and, with
// --apply-acls, applies them.
func enforceACLs(ctx context.Context, w io.Writer, f rolloutFlags, plan []rollout.ACLChange) error {
	if len(plan) == 0 {
		fmt.Fprintln(w, "no direct client of the pattern names a kafka_principal: no ACL to remove")
		return nil
	}
	for _, c := range plan {
		fmt.Fprintln(w, c)
	}
	if !f.applyACLs {
		fmt.Fprintln(w, "run again with --apply-acls (and the Kafka flags of a principal allowed to alter ACLs) to remove them")
		return nil
	}
	conn := f.kafka.kafkaConn()
	if err := conn.Validate(); err != nil {
		return err
	}
	n, err := rollout.ApplyACLPlan(ctx, conn, plan)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "removed %d ACL binding(s)\n", n)
	return nil
}

func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
