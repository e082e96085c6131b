package kafkadev

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// Kafka's own command-line tools (run by kafka.sh tool) as readers
// independent of every reader fencegate wrote: what they print is what
// Apache Kafka says the log and the coordinator hold.

// Tool runs one of Kafka's tools (kafka.sh tool NAME ARGS...) and returns
// what it printed on standard output.
func Tool(name string, args ...string) (string, error) {
	script, err := Script()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("bash", append([]string{script, "tool", name}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	// The console consumer ends at its --timeout-ms with an error and a
	// non-zero status once it has printed everything: that is its normal end.
	if err != nil && !strings.Contains(stderr.String(), "Processed a total of") {
		return "", fmt.Errorf("kafka.sh tool %s %v: %v\n%s", name, args, err, stderr.String())
	}
	return stdout.String(), nil
}

// ToolRecord is one record as kafka-console-consumer printed it.
type ToolRecord struct {
	Partition int32
	Offset    int64
	Headers   map[string]string
	Key       string
	Value     string
}

// ConsoleRead reads partition of topic from the start with Kafka's
// console consumer (read_committed: what a downstream reader of Apache
// Kafka sees), with offsets, headers and keys printed; it ends after
// quiet seconds without a record.
func ConsoleRead(brokers, topic string, partition int32, quiet int) ([]ToolRecord, error) {
	return consoleRead(brokers, topic, quiet, "--partition", strconv.Itoa(int(partition)), "--offset", "earliest")
}

// ConsoleReadTopic reads every partition of topic from the start as
// ConsoleRead does, in one run (one JVM, one quiet wait; a group of the
// tool's own).
func ConsoleReadTopic(brokers, topic string, quiet int) ([]ToolRecord, error) {
	return consoleRead(brokers, topic, quiet, "--from-beginning")
}

func consoleRead(brokers, topic string, quiet int, from ...string) ([]ToolRecord, error) {
	args := append([]string{"--bootstrap-server", brokers, "--topic", topic, "--isolation-level", "read_committed",
		"--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true",
		"--formatter-property", "print.headers=true", "--formatter-property", "print.key=true",
		"--timeout-ms", strconv.Itoa(quiet * 1000)}, from...)
	out, err := Tool("console-consumer", args...)
	if err != nil {
		return nil, err
	}
	var recs []ToolRecord
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		r, err := parseConsoleLine(line)
		if err != nil {
			return nil, fmt.Errorf("console consumer line %q: %w", line, err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// parseConsoleLine reads
// "Partition:P<TAB>Offset:N<TAB>h1:v1,h2:v2<TAB>key<TAB>value".
func parseConsoleLine(line string) (ToolRecord, error) {
	f := strings.SplitN(line, "\t", 5)
	if len(f) != 5 || !strings.HasPrefix(f[0], "Partition:") || !strings.HasPrefix(f[1], "Offset:") {
		return ToolRecord{}, fmt.Errorf("want 5 tab-separated fields, the first two \"Partition:P\" and \"Offset:N\"")
	}
	part, err := strconv.ParseInt(strings.TrimPrefix(f[0], "Partition:"), 10, 32)
	if err != nil {
		return ToolRecord{}, err
	}
	off, err := strconv.ParseInt(strings.TrimPrefix(f[1], "Offset:"), 10, 64)
	if err != nil {
		return ToolRecord{}, err
	}
	r := ToolRecord{Partition: int32(part), Offset: off, Headers: map[string]string{}, Key: f[3], Value: f[4]}
	if f[2] != "NO_HEADERS" {
		for _, h := range strings.Split(f[2], ",") {
			k, v, _ := strings.Cut(h, ":")
			r.Headers[k] = v
		}
	}
	return r, nil
}
