package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/gateway"
)

// The packaging in deploy/ and the Dockerfile start the binary with flags
// and FENCEGATE_* variables. A misspelt flag fails at start, but a misspelt
// variable is silently ignored (parse reads only the variables of flags that
// exist), so a gateway could start without, say, its SASL password and look
// healthy. These tests read every place that starts the binary and hold
// each name and value against the real flag sets of its subcommand.

// repoRoot is the repository, seen from this package's directory.
const repoRoot = "../.."

// invocation is one way the packaging starts the binary.
type invocation struct {
	where string
	args  []string // subcommand first
	// env holds FENCEGATE_* variables; a value the packaging does not know
	// (a secret, a compose interpolation) is secretValue.
	env map[string]string
	// grace is how long the platform waits after SIGTERM before SIGKILL
	// (declared, or the platform's default); pause is what runs before
	// SIGTERM within it (a Kubernetes preStop sleep). Zero grace: not a
	// deployment (the Dockerfile's defaults).
	grace, pause time.Duration
	// credentials are the names a systemd unit loads (LoadCredential=),
	// which %d/<name> in its variables may name; nil elsewhere.
	credentials map[string]bool
}

// secretValue stands for a value filled in at deploy time. Every flag fed
// from a secret is a string flag, so any text parses.
const secretValue = "value-from-a-secret"

var envMark = regexp.MustCompile(`\[(FENCEGATE_[A-Z0-9_]+)[\] ]`)

// acceptedVariables returns the FENCEGATE_* variables subcommand sub
// reads, as its own -h marks them (settings and secrets; the other flags
// read none).
func acceptedVariables(t *testing.T, sub string) map[string]bool {
	t.Helper()
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{sub, "-h"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("fencegate %s -h exited %d: %s", sub, code, stderr.String())
	}
	vars := map[string]bool{}
	for _, m := range envMark.FindAllStringSubmatch(stderr.String(), -1) {
		vars[m[1]] = true
	}
	if len(vars) == 0 {
		t.Fatalf("fencegate %s -h marked no variable", sub)
	}
	return vars
}

// problems lists what the subcommand of inv refuses or would ignore: a
// FENCEGATE_* variable that is no flag of it, an unknown flag, a value that
// does not parse. t sets and restores the variables.
func problems(t *testing.T, inv invocation) []string {
	t.Helper()
	if len(inv.args) == 0 {
		return []string{"no subcommand"}
	}
	sub := inv.args[0]
	if _, ok := commands()[sub]; !ok {
		return []string{"unknown subcommand " + sub}
	}
	byEnv := acceptedVariables(t, sub)
	var out []string
	for _, k := range sortedKeys(inv.env) {
		if !byEnv[k] {
			out = append(out, k+" is no flag of `fencegate "+sub+"` (it would be ignored)")
		}
	}
	// Values: the real parse with the same variables set, then -h, which
	// stops before anything starts. A bad value or an unknown command-line
	// flag fails here.
	for k, v := range inv.env {
		t.Setenv(k, v)
	}
	defer func() {
		for k := range inv.env {
			_ = os.Unsetenv(k)
		}
	}()
	var stderr bytes.Buffer
	args := append(append([]string{}, inv.args...), "-h")
	if code := run(context.Background(), args, io.Discard, &stderr); code != 0 {
		out = append(out, "fencegate "+strings.Join(inv.args, " ")+" refused its flags or variables: "+lastLine(stderr.String()))
	}
	return out
}

// lastLine is the error line of the binary's output, past its usage text.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "fencegate ") && strings.Contains(l, ": ") || strings.Contains(l, "not defined") {
			return l
		}
	}
	return lines[len(lines)-1]
}

// value is what the packaging sets a variable to, or secretValue when it is
// filled in at deploy time.
func value(v string) string {
	if strings.Contains(v, "${") {
		return secretValue
	}
	return v
}

// fencegateEnv keeps the FENCEGATE_* entries of env.
func fencegateEnv(env map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		if strings.HasPrefix(k, "FENCEGATE_") {
			out[k] = value(v)
		}
	}
	return out
}

// composeFile is the part of deploy/compose/compose.yaml these tests read.
type composeFile struct {
	Services map[string]struct {
		Image           string         `yaml:"image"`
		Command         []string       `yaml:"command"`
		Environment     map[string]any `yaml:"environment"`
		StopGracePeriod string         `yaml:"stop_grace_period"`
	} `yaml:"services"`
}

// Platform defaults of the time between SIGTERM and SIGKILL.
const (
	composeDefaultGrace = 10 * time.Second // docker stop, stop_grace_period unset
	k8sDefaultGrace     = 30 * time.Second // terminationGracePeriodSeconds unset
	systemdDefaultGrace = 90 * time.Second // DefaultTimeoutStopSec
)

func readCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy/compose/compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return c
}

func stringMap(m map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		switch v := v.(type) {
		case string:
			out[k] = v
		case nil:
			out[k] = ""
		default:
			b, _ := yaml.Marshal(v)
			out[k] = strings.TrimSpace(string(b))
		}
	}
	return out
}

func composeInvocations(t *testing.T) []invocation {
	var out []invocation
	for name, s := range readCompose(t).Services {
		if !strings.HasPrefix(s.Image, "fencegate:") {
			continue
		}
		grace := composeDefaultGrace
		if s.StopGracePeriod != "" {
			d, err := time.ParseDuration(s.StopGracePeriod)
			if err != nil {
				t.Fatalf("compose.yaml service %s: stop_grace_period %q: %v", name, s.StopGracePeriod, err)
			}
			grace = d
		}
		out = append(out, invocation{where: "compose.yaml service " + name, args: s.Command,
			env: fencegateEnv(stringMap(s.Environment)), grace: grace})
	}
	return out
}

// k8sContainer is the part of a pod's container these tests read.
type k8sContainer struct {
	Name      string   `yaml:"name"`
	Image     string   `yaml:"image"`
	Args      []string `yaml:"args"`
	Lifecycle struct {
		PreStop struct {
			Exec struct {
				Command []string `yaml:"command"`
			} `yaml:"exec"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	ReadinessProbe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
		} `yaml:"httpGet"`
	} `yaml:"readinessProbe"`
	Env []struct {
		Name      string         `yaml:"name"`
		Value     *string        `yaml:"value"`
		ValueFrom map[string]any `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
	} `yaml:"envFrom"`
}

// k8sObject is the part of a Kubernetes manifest these tests read.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		Template struct {
			Spec struct {
				TerminationGracePeriodSeconds *int64         `yaml:"terminationGracePeriodSeconds"`
				InitContainers                []k8sContainer `yaml:"initContainers"`
				Containers                    []k8sContainer `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// k8sFiles are the Kubernetes manifests: the Helm chart rendered with its
// default values and with TLS, ServiceMonitor and NetworkPolicy on
// (deploy/helm/rendered/, which deploy/check/render-helm.sh proves equal to
// `helm template` in make lint), and the example Secrets. Each rendering is
// one deployment of its own.
func k8sFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy/helm/rendered/*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("deploy/helm/rendered: %v (%d files, want default.yaml and full.yaml)", err, len(files))
	}
	return append(files, filepath.Join(repoRoot, "deploy/helm/secret.example.yaml"))
}

// podEnvExample are the values the kubelet gives the variables the chart
// defines from the pod's fields; $(NAME) in a later value is expanded from
// them, as the kubelet does.
var podEnvExample = map[string]string{"POD_NAME": "fencegate-gateway-5d8f7c9b4-x2x7q", "NAMESPACE": "fencegate"}

// k8sRef is a $(NAME) reference of a container variable.
var k8sRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandK8s expands v's $(NAME) references from the variables defined
// above it; a reference to no such variable stays, as the kubelet leaves
// it, and is reported.
func expandK8s(v string, defined map[string]string) (string, []string) {
	var missing []string
	out := k8sRef.ReplaceAllStringFunc(v, func(ref string) string {
		name := k8sRef.FindStringSubmatch(ref)[1]
		if val, ok := defined[name]; ok {
			return val
		}
		missing = append(missing, name)
		return ref
	})
	return out, missing
}

func readK8s(t *testing.T) map[string][]k8sObject {
	t.Helper()
	out := map[string][]k8sObject{}
	for _, f := range k8sFiles(t) {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(fh)
		for {
			var o k8sObject
			if err := dec.Decode(&o); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind != "" {
				out[filepath.Base(f)] = append(out[filepath.Base(f)], o)
			}
		}
		_ = fh.Close()
	}
	return out
}

// k8sEnv is what container c of a rendering sees: its config maps' data,
// then its env in order, $(NAME) expanded as the kubelet does. A value
// from a Secret is secretValue; one from the pod's fields is
// podEnvExample's.
func k8sEnv(t *testing.T, where string, c k8sContainer, configMaps map[string]map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			continue
		}
		cm, ok := configMaps[ef.ConfigMapRef.Name]
		if !ok {
			t.Errorf("%s: envFrom config map %q is not in the rendering", where, ef.ConfigMapRef.Name)
		}
		for k, v := range cm {
			env[k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.Value != nil:
			v, missing := expandK8s(*e.Value, env)
			for _, m := range missing {
				t.Errorf("%s: %s names $(%s), which no variable above it defines (the kubelet would leave it as it is)", where, e.Name, m)
			}
			env[e.Name] = v
		case e.ValueFrom["fieldRef"] != nil:
			v, ok := podEnvExample[e.Name]
			if !ok {
				t.Errorf("%s: %s from a pod field has no example value in podEnvExample", where, e.Name)
			}
			env[e.Name] = v
		case e.ValueFrom != nil:
			env[e.Name] = secretValue
		}
	}
	return env
}

// k8sConfigMaps are the data of a rendering's ConfigMaps, by name.
func k8sConfigMaps(list []k8sObject) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, o := range list {
		if o.Kind == "ConfigMap" {
			out[o.Metadata.Name] = o.Data
		}
	}
	return out
}

func k8sInvocations(t *testing.T) []invocation {
	var out []invocation
	for file, list := range readK8s(t) {
		configMaps := k8sConfigMaps(list)
		for _, o := range list {
			pod := o.Spec.Template.Spec
			for _, c := range append(append([]k8sContainer{}, pod.InitContainers...), pod.Containers...) {
				if !strings.HasPrefix(c.Image, "fencegate:") {
					continue
				}
				where := file + " " + o.Kind + "/" + o.Metadata.Name + " container " + c.Name
				env := k8sEnv(t, where, c, configMaps)
				grace := k8sDefaultGrace
				if g := o.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
					grace = time.Duration(*g) * time.Second
				}
				// The preStop pause: `sleep N`, the only hook used here.
				var pause time.Duration
				if cmd := c.Lifecycle.PreStop.Exec.Command; len(cmd) > 0 {
					n, err := strconv.Atoi(cmd[len(cmd)-1])
					if len(cmd) != 2 || cmd[0] != "sleep" || err != nil {
						t.Fatalf("%s: preStop %q is not `sleep N`: the stop budget cannot be checked", where, cmd)
					}
					pause = time.Duration(n) * time.Second
				}
				if len(c.Args) > 0 && c.Args[0] == "serve" && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
					t.Errorf("%s: readiness probe on %q, want /readyz (503 while draining)", where, c.ReadinessProbe.HTTPGet.Path)
				}
				out = append(out, invocation{where: where, args: c.Args, env: fencegateEnv(env), grace: grace, pause: pause})
			}
		}
	}
	return out
}

// unitFile reads the keys of a systemd unit (repeated keys keep every value).
func unitFile(t *testing.T, path string) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			out[k] = append(out[k], v)
		}
	}
	return out
}

// envFile reads KEY=VALUE lines.
func envFile(t *testing.T, path string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (every EnvironmentFile= of a unit has an example beside it)", err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			out[k] = v
		}
	}
	return out
}

func systemdInvocations(t *testing.T) []invocation {
	units, err := filepath.Glob(filepath.Join(repoRoot, "deploy/systemd/*.service"))
	if err != nil || len(units) == 0 {
		t.Fatalf("deploy/systemd: %v (%d units)", err, len(units))
	}
	var out []invocation
	for _, u := range units {
		keys := unitFile(t, u)
		if len(keys["ExecStart"]) != 1 {
			t.Fatalf("%s: want one ExecStart, have %d", u, len(keys["ExecStart"]))
		}
		argv := strings.Fields(keys["ExecStart"][0])
		if argv[0] != "/usr/local/bin/fencegate" {
			t.Errorf("%s: ExecStart runs %s", u, argv[0])
		}
		env := map[string]string{}
		for _, e := range keys["Environment"] {
			k, v, _ := strings.Cut(e, "=")
			env[k] = v
		}
		// /etc/fencegate/gateway.env -> deploy/systemd/gateway.env.example
		for _, f := range keys["EnvironmentFile"] {
			for k, v := range envFile(t, filepath.Join(repoRoot, "deploy/systemd", filepath.Base(strings.TrimPrefix(f, "-"))+".example")) {
				env[k] = v
			}
		}
		grace := systemdDefaultGrace
		if v := keys["TimeoutStopSec"]; len(v) > 0 {
			grace = systemdSpan(t, u, v[len(v)-1])
		}
		creds := map[string]bool{}
		for _, c := range keys["LoadCredential"] {
			name, _, _ := strings.Cut(c, ":")
			creds[name] = true
		}
		out = append(out, invocation{where: filepath.Base(u), args: argv[1:], env: fencegateEnv(env),
			grace: grace, credentials: creds})
	}
	return out
}

// systemdSpan parses the time spans used in the units: "45s", "2min",
// "1min 30s", or bare seconds.
func systemdSpan(t *testing.T, unit, v string) time.Duration {
	t.Helper()
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second
	}
	d, err := time.ParseDuration(strings.ReplaceAll(strings.ReplaceAll(v, "min", "m"), " ", ""))
	if err != nil {
		t.Fatalf("%s: time span %q: %v", unit, v, err)
	}
	return d
}

// dockerfileEnv reads the ENV defaults of the runtime image; they apply to
// its default command, serve.
func dockerfileEnv(t *testing.T) invocation {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	env := map[string]string{}
	var cmd []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && f[0] == "ENV":
			for _, kv := range f[1:] {
				if k, v, ok := strings.Cut(kv, "="); ok {
					env[k] = v
				}
			}
		case len(f) > 1 && f[0] == "CMD":
			if err := yaml.Unmarshal([]byte(strings.Join(f[1:], " ")), &cmd); err != nil {
				t.Fatalf("Dockerfile CMD: %v", err)
			}
		}
	}
	if len(env) == 0 || len(cmd) == 0 {
		t.Fatalf("Dockerfile: ENV %v, CMD %v", env, cmd)
	}
	return invocation{where: "Dockerfile ENV and CMD", args: cmd, env: fencegateEnv(env)}
}

// TestDeployFlagsAndEnvironment: every flag and FENCEGATE_* variable that
// the Dockerfile, the compose services, the Kubernetes manifests and the
// systemd units give the binary is one its subcommand accepts, with a value
// it parses.
func TestDeployFlagsAndEnvironment(t *testing.T) {
	invs := []invocation{dockerfileEnv(t)}
	invs = append(invs, composeInvocations(t)...)
	invs = append(invs, k8sInvocations(t)...)
	invs = append(invs, systemdInvocations(t)...)
	sort.Slice(invs, func(i, j int) bool { return invs[i].where < invs[j].where })
	subs := map[string]int{}
	for _, inv := range invs {
		t.Run(inv.where, func(t *testing.T) {
			for _, p := range problems(t, inv) {
				t.Error(p)
			}
		})
		subs[inv.args[0]]++
	}
	// The packaging starts every long-running part and the migrations.
	for _, sub := range []string{"serve", "materialize", "migrate"} {
		if subs[sub] < 3 {
			t.Errorf("%q is started %d times across Dockerfile, compose, k8s and systemd; want it in each", sub, subs[sub])
		}
	}
}

// TestDeployCatchesUnknownNames: the check fails on a misspelt variable,
// on a variable of another subcommand, on a flag the binary does not have
// and on a value that does not parse (a check that cannot fail proves
// nothing).
func TestDeployCatchesUnknownNames(t *testing.T) {
	for _, inv := range []invocation{
		{where: "misspelt variable", args: []string{"serve"}, env: map[string]string{"FENCEGATE_KAFKA_SASL_PASWORD": "x"}},
		{where: "variable of another command", args: []string{"migrate"}, env: map[string]string{"FENCEGATE_BARRIER_KEY": "x"}},
		{where: "unknown flag", args: []string{"materialize", "--drain-timeout", "30s"}},
		{where: "bad value", args: []string{"serve"}, env: map[string]string{"FENCEGATE_MAX_TTL": "ten minutes"}},
	} {
		t.Run(inv.where, func(t *testing.T) {
			if p := problems(t, inv); len(p) == 0 {
				t.Error("not caught")
			}
		})
	}
}

// TestDeployComposeClusterID: a KRaft cluster id is a UUID, 16 bytes in
// unpadded base64url; Kafka refuses to format storage with anything else.
func TestDeployComposeClusterID(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy/compose/compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Environment map[string]any `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	id, _ := c.Services["kafka"].Environment["CLUSTER_ID"].(string)
	// ${KAFKA_CLUSTER_ID:-<default>}: the default is what runs without .env.
	if m := regexp.MustCompile(`^\$\{[A-Z_]+:-([^}]*)\}$`).FindStringSubmatch(id); m != nil {
		id = m[1]
	}
	b, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || len(b) != 16 || len(id) != 22 {
		t.Fatalf("CLUSTER_ID %q: %d bytes (%v), want 22 characters decoding to 16 bytes", id, len(b), err)
	}
}

// TestDeployConfigFiles: the fencegate.yaml files the packaging ships
// (compose template, Kubernetes Secret example) load with the gateway's own
// parser, and name the transactional id prefix the compose ACLs grant.
func TestDeployConfigFiles(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	tmpl, err := os.ReadFile(filepath.Join(repoRoot, "deploy/compose/fencegate.yaml.in"))
	if err != nil {
		t.Fatal(err)
	}
	fc, _, _, err := parseGatewayConfig(bytes.ReplaceAll(tmpl, []byte("@WORKER_TOKEN_SHA256@"), []byte(hash)))
	if err != nil {
		t.Fatalf("compose fencegate.yaml.in: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy/compose/compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte("TXN_PREFIX: "+fc.TransactionalIDPrefix+"\n")) {
		t.Errorf("compose kafka-init grants a prefix other than the config's %q", fc.TransactionalIDPrefix)
	}
	for _, list := range readK8s(t) {
		for _, o := range list {
			cfg, ok := o.StringData["fencegate.yaml"]
			if o.Kind != "Secret" || !ok { // a TLS Secret holds no config
				continue
			}
			if _, _, _, err := parseGatewayConfig([]byte(cfg)); err != nil {
				t.Errorf("k8s Secret %s fencegate.yaml: %v", o.Metadata.Name, err)
			}
		}
	}
}

// flagDefault is the default of a duration flag of sub, as its -h prints it.
func flagDefault(t *testing.T, sub, name string) time.Duration {
	t.Helper()
	var stderr bytes.Buffer
	run(context.Background(), []string{sub, "-h"}, io.Discard, &stderr)
	lines := strings.Split(stderr.String(), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "  -"+name+" ") && i+1 < len(lines) {
			if m := regexp.MustCompile(`\(default ([^)]+)\)`).FindStringSubmatch(lines[i+1]); m != nil {
				d, err := time.ParseDuration(m[1])
				if err != nil {
					t.Fatalf("--%s default %q: %v", name, m[1], err)
				}
				return d
			}
		}
	}
	t.Fatalf("fencegate %s -h prints no default for --%s", sub, name)
	return 0
}

// serveStopTail is what `serve` does after the drain and before it exits:
// leaving the replica registry (bounded by one heartbeat, 2s:
// gateway.Config.HeartbeatEvery) and the listener's shutdown (bounded by
// 10s in listenAndServe). Raise it with either.
const serveStopTail = 12 * time.Second

// deployments are the invocations of the packaging that run somewhere: the
// compose services, the Kubernetes containers and the systemd units.
func deployments(t *testing.T) []invocation {
	var invs []invocation
	invs = append(invs, composeInvocations(t)...)
	invs = append(invs, k8sInvocations(t)...)
	invs = append(invs, systemdInvocations(t)...)
	sort.Slice(invs, func(i, j int) bool { return invs[i].where < invs[j].where })
	return invs
}

// TestDeployStopBudget: every gateway the packaging runs gets to finish its
// drain before the platform kills it: the pause before SIGTERM, then
// --drain-timeout, then serve's own tail fit in the grace period
// (stop_grace_period, terminationGracePeriodSeconds, TimeoutStopSec, or
// their defaults when unset).
func TestDeployStopBudget(t *testing.T) {
	def := flagDefault(t, "serve", "drain-timeout")
	n := 0
	for _, inv := range deployments(t) {
		if inv.args[0] != "serve" {
			continue
		}
		n++
		drain := def
		if v, ok := inv.env["FENCEGATE_DRAIN_TIMEOUT"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Errorf("%s: FENCEGATE_DRAIN_TIMEOUT %q: %v", inv.where, v, err)
				continue
			}
			drain = d
		}
		if need := inv.pause + drain + serveStopTail; inv.grace <= need {
			t.Errorf("%s: killed %v after the stop begins, but the pause (%v) + --drain-timeout (%v) + shutdown (%v) take up to %v",
				inv.where, inv.grace, inv.pause, drain, serveStopTail, need)
		}
	}
	if n < 3 {
		t.Errorf("%d gateways in the packaging, want compose, k8s and systemd", n)
	}
}

// fileVars are the variables whose value is a file the binary opens.
var fileVars = regexp.MustCompile(`^FENCEGATE_(CONFIG|TLS_CERT|TLS_KEY|TLS_CLIENT_CA|[A-Z_]+_FILE)$`)

// TestDeploySecretsAndTLS: every gateway and materializer the packaging
// runs reaches Kafka over TLS, verifying the brokers against a CA file (no
// SASL password on a plaintext connection), and gets its barrier key and
// SASL password from files, never from the environment (setting both is
// refused at start anyway). In systemd units a file under the credentials
// directory (%d) is a credential the unit loads. Whether compose and k8s
// mount those files is deploy/check's business (compose-binds.mjs,
// k8s.mjs), where the mounts are known.
func TestDeploySecretsAndTLS(t *testing.T) {
	for _, inv := range deployments(t) {
		sub := inv.args[0]
		if sub != "serve" && sub != "materialize" {
			continue
		}
		t.Run(inv.where, func(t *testing.T) {
			env := inv.env
			for _, k := range []string{"FENCEGATE_BARRIER_KEY", "FENCEGATE_KAFKA_SASL_PASSWORD"} {
				if _, ok := env[k]; ok {
					t.Errorf("%s is set: give the secret as a file (%s_FILE)", k, k)
				}
			}
			if env["FENCEGATE_BARRIER_KEY_FILE"] == "" {
				t.Error("no FENCEGATE_BARRIER_KEY_FILE")
			}
			if p := env["FENCEGATE_KAFKA_SECURITY_PROTOCOL"]; p != "SASL_SSL" && p != "SSL" {
				t.Errorf("FENCEGATE_KAFKA_SECURITY_PROTOCOL %q, want SASL_SSL or SSL", p)
			}
			if env["FENCEGATE_KAFKA_CA_FILE"] == "" {
				t.Error("no FENCEGATE_KAFKA_CA_FILE: the brokers would be verified against the system roots")
			}
			if env["FENCEGATE_KAFKA_SASL_MECHANISM"] != "" && env["FENCEGATE_KAFKA_SASL_PASSWORD_FILE"] == "" {
				t.Error("SASL without FENCEGATE_KAFKA_SASL_PASSWORD_FILE")
			}
			for _, k := range sortedKeys(env) {
				v := env[k]
				if !fileVars.MatchString(k) || v == secretValue {
					continue
				}
				if !strings.HasPrefix(v, "/") && !strings.HasPrefix(v, "%d/") {
					t.Errorf("%s=%s is not an absolute path", k, v)
				}
				if name, ok := strings.CutPrefix(v, "%d/"); ok {
					if inv.credentials == nil {
						t.Errorf("%s=%s: %%d is systemd's credentials directory, and this is not a unit", k, v)
					} else if !inv.credentials[name] {
						t.Errorf("%s=%s: the unit loads no credential %q (LoadCredential=%s:...)", k, v, name, name)
					}
				}
			}
		})
	}
}

// TestDeployAdvertiseURLs: every gateway the packaging runs advertises a
// URL serve accepts: https:// where it serves HTTPS (FENCEGATE_TLS_CERT),
// so that a 421 never sends a worker's bearer token over plain HTTP (FM42).
func TestDeployAdvertiseURLs(t *testing.T) {
	n := 0
	for _, inv := range deployments(t) {
		if inv.args[0] != "serve" {
			continue
		}
		adv := inv.env["FENCEGATE_ADVERTISE_URL"]
		if adv == "" {
			t.Errorf("%s: no FENCEGATE_ADVERTISE_URL: the default is the listen address, which other hosts cannot reach", inv.where)
			continue
		}
		n++
		sc := gateway.ServerConfig{TLSCertFile: inv.env["FENCEGATE_TLS_CERT"], TLSKeyFile: inv.env["FENCEGATE_TLS_KEY"]}
		if _, err := sc.AdvertiseURL(adv, inv.env["FENCEGATE_LISTEN"]); err != nil {
			t.Errorf("%s: %v", inv.where, err)
		}
	}
	if n < 3 {
		t.Errorf("%d gateways advertise a URL, want compose, k8s and systemd", n)
	}
}

// TestMaterializerGrantsCoverItsQueries: the materializer's role gets the
// grants of the RUNBOOK's "materializer grants" block, and compose's
// grants service runs the same ones. Every table the materializer's
// statements name (materializer/queries.go) is granted, and none of the
// lease store's tables is (FM42: a materializer that can write replicas
// can send workers and their tokens anywhere).
func TestMaterializerGrantsCoverItsQueries(t *testing.T) {
	runbook, err := os.ReadFile(filepath.Join(repoRoot, runbookPath))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(runbook), "-- materializer grants\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || block == "" {
		t.Fatal("docs/RUNBOOK.md has no ```sql block starting with -- materializer grants")
	}
	grantRe := regexp.MustCompile(`GRANT ([A-Z, ]+) ON ([a-z_, ]+) TO fencegate_materializer;`)
	granted := map[string]string{}
	var stmts []string
	for _, m := range grantRe.FindAllStringSubmatch(block, -1) {
		stmts = append(stmts, m[0])
		for _, tbl := range strings.Split(m[2], ",") {
			granted[strings.TrimSpace(tbl)] = m[1]
		}
	}
	queries, err := os.ReadFile("../../materializer/queries.go")
	if err != nil {
		t.Fatal(err)
	}
	// The temporary stage, common table expressions and the lease names of
	// the SQL's own comments are not tables.
	notTables := map[string]bool{"fencegate_stage": true, "a": true, "d": true}
	used := regexp.MustCompile(`(?:FROM|INTO|UPDATE|JOIN) ([a-z_]+)`)
	for _, m := range used.FindAllStringSubmatch(string(queries), -1) {
		if tbl := m[1]; !notTables[tbl] && granted[tbl] == "" {
			t.Errorf("materializer/queries.go uses %s, which the materializer grants do not cover", tbl)
		}
	}
	for _, tbl := range []string{"leases", "lease_events", "replicas", "placements", "lease_token_seq", "schema_migrations", "ledger_migrations"} {
		if g := granted[tbl]; g != "" {
			t.Errorf("the materializer role is granted %s on %s, a table it must not write", g, tbl)
		}
	}
	compose, err := os.ReadFile("../../deploy/compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if !strings.Contains(string(compose), s) {
			t.Errorf("compose's grants service does not run %q", s)
		}
	}
}

// TestDeployK8sMigratesFirstAndForwards: in every rendering of the Helm
// chart, each gateway and materializer pod runs `fencegate migrate` as an
// init container, so no component serves on a schema older than its
// binary (and no Job races the pods); and each gateway forwards to the
// holder under the replicas' credential, verifying the other replicas
// against a CA file where it serves HTTPS, so that workers need only the
// Service address.
func TestDeployK8sMigratesFirstAndForwards(t *testing.T) {
	gateways := 0
	for file, list := range readK8s(t) {
		configMaps := k8sConfigMaps(list)
		for _, o := range list {
			pod := o.Spec.Template.Spec
			if o.Kind == "Job" {
				t.Errorf("%s: Job/%s: migrations run in the pods' init containers, not in a Job racing them", file, o.Metadata.Name)
			}
			if o.Kind != "Deployment" {
				continue
			}
			migrates := false
			for _, c := range pod.InitContainers {
				migrates = migrates || len(c.Args) > 0 && c.Args[0] == "migrate"
			}
			if !migrates {
				t.Errorf("%s: Deployment/%s has no `fencegate migrate` init container", file, o.Metadata.Name)
			}
			for _, c := range pod.Containers {
				if len(c.Args) == 0 || c.Args[0] != "serve" {
					continue
				}
				gateways++
				env := k8sEnv(t, file, c, configMaps)
				if env["FENCEGATE_REPLICA_CREDENTIAL_FILE"] == "" {
					t.Errorf("%s: Deployment/%s: no FENCEGATE_REPLICA_CREDENTIAL_FILE: replicas answer 421 with a pod name workers outside the cluster cannot reach", file, o.Metadata.Name)
				}
				if env["FENCEGATE_TLS_CERT"] != "" && env["FENCEGATE_REPLICA_CA_FILE"] == "" {
					t.Errorf("%s: Deployment/%s serves HTTPS but names no FENCEGATE_REPLICA_CA_FILE for the other replicas' certificates", file, o.Metadata.Name)
				}
			}
		}
	}
	if gateways < 2 {
		t.Errorf("%d gateways in the chart's renderings, want one in each", gateways)
	}
}

// TestFM93_HelmForwardsOnlyOverTLS: in every rendering of the Helm chart
// (its defaults included), a gateway that forwards under the replicas'
// credential serves HTTPS, or a NetworkPolicy of the rendering keeps the
// port to the replicas and the workers; and it names the headless Service
// as the fleet (FENCEGATE_REPLICA_HOSTS, FM88). The defaults forwarded
// the credential in clear, with no NetworkPolicy.
func TestFM93_HelmForwardsOnlyOverTLS(t *testing.T) {
	for file, list := range readK8s(t) {
		configMaps := k8sConfigMaps(list)
		policy := false
		for _, o := range list {
			policy = policy || o.Kind == "NetworkPolicy"
		}
		for _, o := range list {
			if o.Kind != "Deployment" {
				continue
			}
			for _, c := range o.Spec.Template.Spec.Containers {
				if len(c.Args) == 0 || c.Args[0] != "serve" {
					continue
				}
				env := k8sEnv(t, file, c, configMaps)
				if env["FENCEGATE_REPLICA_CREDENTIAL_FILE"] == "" {
					continue
				}
				if env["FENCEGATE_TLS_CERT"] == "" && !policy {
					t.Errorf("%s: Deployment/%s forwards the replica credential over plain HTTP with no NetworkPolicy", file, o.Metadata.Name)
				}
				if !strings.Contains(env["FENCEGATE_REPLICA_HOSTS"], ".svc:") {
					t.Errorf("%s: Deployment/%s: FENCEGATE_REPLICA_HOSTS %q does not name the headless Service", file, o.Metadata.Name, env["FENCEGATE_REPLICA_HOSTS"])
				}
			}
		}
	}
}
