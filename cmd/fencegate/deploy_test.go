package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

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
}

// secretValue stands for a value filled in at deploy time. Every flag fed
// from a secret is a string flag, so any text parses.
const secretValue = "value-from-a-secret"

var flagLine = regexp.MustCompile(`^  -([a-z0-9-]+)`)

// acceptedNames returns the flags of subcommand sub as its own -h prints
// them (the real dispatcher and flag set, whatever function builds it).
func acceptedNames(t *testing.T, sub string) map[string]bool {
	t.Helper()
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{sub, "-h"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("fencegate %s -h exited %d: %s", sub, code, stderr.String())
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		if m := flagLine.FindStringSubmatch(sc.Text()); m != nil {
			names[m[1]] = true
		}
	}
	if len(names) == 0 {
		t.Fatalf("fencegate %s -h listed no flags", sub)
	}
	return names
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
	byEnv := map[string]bool{}
	for n := range acceptedNames(t, sub) {
		byEnv[envName(n)] = true
	}
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
		Image       string         `yaml:"image"`
		Command     []string       `yaml:"command"`
		Environment map[string]any `yaml:"environment"`
	} `yaml:"services"`
}

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
		out = append(out, invocation{where: "compose.yaml service " + name, args: s.Command,
			env: fencegateEnv(stringMap(s.Environment))})
	}
	return out
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
				Containers []struct {
					Name  string   `yaml:"name"`
					Image string   `yaml:"image"`
					Args  []string `yaml:"args"`
					Env   []struct {
						Name      string         `yaml:"name"`
						Value     *string        `yaml:"value"`
						ValueFrom map[string]any `yaml:"valueFrom"`
					} `yaml:"env"`
					EnvFrom []struct {
						ConfigMapRef *struct {
							Name string `yaml:"name"`
						} `yaml:"configMapRef"`
					} `yaml:"envFrom"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func readK8s(t *testing.T) map[string][]k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy/k8s/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("deploy/k8s: %v (%d files)", err, len(files))
	}
	out := map[string][]k8sObject{}
	for _, f := range files {
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
			out[filepath.Base(f)] = append(out[filepath.Base(f)], o)
		}
		_ = fh.Close()
	}
	return out
}

func k8sInvocations(t *testing.T) []invocation {
	objs := readK8s(t)
	configMaps := map[string]map[string]string{}
	for _, list := range objs {
		for _, o := range list {
			if o.Kind == "ConfigMap" {
				configMaps[o.Metadata.Name] = o.Data
			}
		}
	}
	var out []invocation
	for file, list := range objs {
		for _, o := range list {
			for _, c := range o.Spec.Template.Spec.Containers {
				if !strings.HasPrefix(c.Image, "fencegate:") {
					continue
				}
				env := map[string]string{}
				for _, ef := range c.EnvFrom {
					if ef.ConfigMapRef == nil {
						continue
					}
					cm, ok := configMaps[ef.ConfigMapRef.Name]
					if !ok {
						t.Errorf("%s %s: envFrom config map %q is not in deploy/k8s", file, o.Metadata.Name, ef.ConfigMapRef.Name)
					}
					for k, v := range cm {
						env[k] = v
					}
				}
				for _, e := range c.Env {
					switch {
					case e.Value != nil:
						env[e.Name] = *e.Value
					case e.ValueFrom != nil:
						env[e.Name] = secretValue
					}
				}
				out = append(out, invocation{where: file + " " + o.Kind + "/" + o.Metadata.Name + " container " + c.Name,
					args: c.Args, env: fencegateEnv(env)})
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
		out = append(out, invocation{where: filepath.Base(u), args: argv[1:], env: fencegateEnv(env)})
	}
	return out
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
	fc, _, _, err := gateway.ParseFileConfig(bytes.ReplaceAll(tmpl, []byte("@WORKER_TOKEN_SHA256@"), []byte(hash)))
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
			if o.Kind != "Secret" {
				continue
			}
			if _, _, _, err := gateway.ParseFileConfig([]byte(o.StringData["fencegate.yaml"])); err != nil {
				t.Errorf("k8s Secret %s fencegate.yaml: %v", o.Metadata.Name, err)
			}
		}
	}
}
