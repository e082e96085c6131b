package brokercheck

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// The names of the refusals serve makes, as --allow-unsafe-broker takes
// them. Each is a setting that breaks the fence, not a matter of taste.
const (
	// UnsafeUncleanElection: unclean leader election on a route's topic
	// or __transaction_state elects a replica that lacks acknowledged
	// records and markers: a committed batch, or the abort marker that
	// fenced a zombie's records, can vanish (FM100).
	UnsafeUncleanElection = "unclean-leader-election"
	// UnsafeStateMinISR: __transaction_state acknowledged by one copy
	// while more exist: a coordinator's epoch bump can be lost with that
	// broker, and the zombie's epoch becomes current again (FM101).
	UnsafeStateMinISR = "transaction-state-min-isr"
	// UnsafeMaxTimeout: transaction.max.timeout.ms below the gateway's
	// transaction timeout: every InitProducerId, hence every handover,
	// is refused (FM102).
	UnsafeMaxTimeout = "transaction-max-timeout"
)

// UnsafeNames lists every refusal serve may make.
func UnsafeNames() []string {
	return []string{UnsafeUncleanElection, UnsafeStateMinISR, UnsafeMaxTimeout}
}

// judge applies every settings rule to what the cluster said.
func judge(f facts, cfg Config) []Result {
	var out []Result
	for _, t := range f.topics {
		out = append(out, uncleanRule(t, f.broker), replicationRule(t, f.broker))
	}
	out = append(out,
		maxTimeoutRule(f.broker, cfg.TransactionTimeout),
		expirationRule(f.broker, cfg.ParkAfter),
		verificationRule(f.broker),
		transactionVersionRule(f.txnVersion, f.txnVersionErr),
		aclRule(f.acls, cfg))
	return out
}

// errNotReported marks a setting the broker's answer leaves out: a broker
// that does not know it (an older Apache Kafka, a Kafka-compatible
// system, the embedded kfake).
var errNotReported = errors.New("not reported by the broker")

// notReadable is the WARN of a setting that could not be read: refused to
// these credentials, or not reported by the broker.
func notReadable(check, subject string, err error, grant string) Result {
	if errors.Is(err, errNotReported) {
		return Result{Check: check, Subject: subject, Status: Warn,
			Evidence: fmt.Sprintf("%v: this broker may not have the setting (an older or a Kafka-compatible broker)", err),
			Fix:      "check the broker's documentation for the equivalent setting"}
	}
	return Result{Check: check, Subject: subject, Status: Warn,
		Evidence: fmt.Sprintf("not readable with these credentials: %v", err),
		Fix:      "grant " + grant + ", or run verify-broker with a principal that may read it"}
}

func uncleanRule(t topicFacts, b brokerFacts) Result {
	r := Result{Check: cfgUnclean, Subject: t.name}
	v, src, err := topicSetting(t, b, cfgUnclean, cfgUnclean)
	switch {
	case err != nil:
		return notReadable(r.Check, t.name, err, "DescribeConfigs on topic "+t.name+" and on the cluster")
	case v == "true":
		r.Status, r.Unsafe = Fail, UnsafeUncleanElection
		r.Evidence = fmt.Sprintf("%s=true (%s): a replica without the last acknowledged records and markers may become leader; "+
			"a committed batch or the abort marker that fenced a zombie can vanish", cfgUnclean, src)
		r.Fix = fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config %s=false "+
			"(and keep the brokers' default false)", t.name, cfgUnclean)
		return r
	}
	r.Status, r.Evidence = Pass, fmt.Sprintf("%s=%s (%s)", cfgUnclean, v, src)
	return r
}

// topicSetting returns a topic's setting, or, for __transaction_state
// before its creation, the broker setting it will be created with
// (brokerKey on the first broker read).
func topicSetting(t topicFacts, b brokerFacts, key, brokerKey string) (value, source string, err error) {
	if t.exists {
		if t.configErr != nil {
			return "", "", t.configErr
		}
		v, ok := t.configs[key]
		if !ok {
			return "", "", fmt.Errorf("%s: %w", key, errNotReported)
		}
		return v, "topic config", nil
	}
	if t.name != TransactionStateTopic {
		return "", "", fmt.Errorf("topic %s does not exist", t.name)
	}
	if b.err != nil {
		return "", "", b.err
	}
	for id, c := range b.configs {
		if v, ok := c[brokerKey]; ok {
			return v, fmt.Sprintf("broker %d's %s; the topic is not created yet", id, brokerKey), nil
		}
	}
	return "", "", fmt.Errorf("%s: %w", brokerKey, errNotReported)
}

func replicationRule(t topicFacts, b brokerFacts) Result {
	r := Result{Check: "replication", Subject: t.name}
	rf, minISR, src, err := replication(t, b)
	if err != nil {
		return notReadable(r.Check, t.name, err, "DescribeConfigs on topic "+t.name+" and on the cluster")
	}
	r.Evidence = fmt.Sprintf("replication factor %d, %s=%d (%s)", rf, cfgMinISR, minISR, src)
	state := t.name == TransactionStateTopic
	switch {
	case state && rf >= 2 && minISR < 2:
		r.Status, r.Unsafe = Fail, UnsafeStateMinISR
		r.Evidence += ": an epoch bump acknowledged by one copy is lost with its broker, and a zombie's epoch is current again"
		r.Fix = "set min.insync.replicas=2 on __transaction_state (kafka-configs.sh --alter --entity-type topics " +
			"--entity-name __transaction_state --add-config min.insync.replicas=2) and transaction.state.log.min.isr=2 on the brokers"
	case rf == 1:
		r.Status = Warn
		r.Evidence += ": one copy; a lost disk loses it (on a single broker there is no other choice)"
		r.Fix = "replication factor 3 with min.insync.replicas 2 on a production cluster"
	case rf >= 2 && minISR < 2:
		r.Status = Warn
		r.Evidence += ": a batch acknowledged by one copy is lost with its broker"
		r.Fix = "min.insync.replicas=2 on the topic"
	case state && rf == 2:
		r.Status = Warn
		r.Evidence += ": no broker may be down while transactions run"
		r.Fix = "replication factor 3 for __transaction_state (transaction.state.log.replication.factor=3 before it is created)"
	default:
		r.Status = Pass
	}
	return r
}

func replication(t topicFacts, b brokerFacts) (rf, minISR int, source string, err error) {
	v, src, err := topicSetting(t, b, cfgMinISR, cfgStateMinISR)
	if err != nil {
		return 0, 0, "", err
	}
	if minISR, err = strconv.Atoi(v); err != nil {
		return 0, 0, "", fmt.Errorf("%s=%q: %w", cfgMinISR, v, err)
	}
	if t.exists {
		return t.rf, minISR, src, nil
	}
	rfs, _, err := topicSetting(t, b, "", cfgStateRF)
	if err != nil {
		return 0, 0, "", err
	}
	if rf, err = strconv.Atoi(rfs); err != nil {
		return 0, 0, "", fmt.Errorf("%s=%q: %w", cfgStateRF, rfs, err)
	}
	return rf, minISR, src, nil
}

// brokerMin returns the smallest value of a duration setting (in ms)
// across the brokers and the broker holding it.
func brokerMin(b brokerFacts, key string) (time.Duration, int32, error) {
	if b.err != nil {
		return 0, 0, b.err
	}
	found, best, at := false, time.Duration(0), int32(0)
	for id, c := range b.configs {
		v, ok := c[key]
		if !ok {
			continue
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("broker %d: %s=%q: %w", id, key, v, err)
		}
		if d := time.Duration(ms) * time.Millisecond; !found || d < best {
			found, best, at = true, d, id
		}
	}
	if !found {
		return 0, 0, fmt.Errorf("%s: %w", key, errNotReported)
	}
	return best, at, nil
}

func maxTimeoutRule(b brokerFacts, gateway time.Duration) Result {
	r := Result{Check: cfgMaxTimeout, Subject: "cluster"}
	d, id, err := brokerMin(b, cfgMaxTimeout)
	if err != nil {
		return notReadable(r.Check, r.Subject, err, "DescribeConfigs on the cluster")
	}
	r.Evidence = fmt.Sprintf("%s=%s (broker %d, the lowest) against the gateway's --transaction-timeout %s", cfgMaxTimeout, d, id, gateway)
	if d < gateway {
		r.Status, r.Unsafe = Fail, UnsafeMaxTimeout
		r.Evidence += ": the broker refuses every InitProducerId of the gateway (INVALID_TRANSACTION_TIMEOUT), so no handover completes"
		r.Fix = fmt.Sprintf("raise %s to at least %d on every broker, or lower serve --transaction-timeout to %s or less",
			cfgMaxTimeout, gateway.Milliseconds(), d)
		return r
	}
	r.Status = Pass
	return r
}

func expirationRule(b brokerFacts, parkAfter time.Duration) Result {
	r := Result{Check: cfgExpiration, Subject: "cluster"}
	d, id, err := brokerMin(b, cfgExpiration)
	if err != nil {
		return notReadable(r.Check, r.Subject, err, "DescribeConfigs on the cluster")
	}
	idle := "never parked (--park-after 0)"
	if parkAfter > 0 {
		idle = fmt.Sprintf("parked after %s idle (--park-after)", parkAfter)
	}
	r.Evidence = fmt.Sprintf("%s=%s (broker %d, the lowest); gateway producers are %s", cfgExpiration, d, id, idle)
	if parkAfter <= 0 || parkAfter >= d {
		r.Status = Warn
		r.Evidence += ": an open, idle producer can outlive its id, and its fence then rests on the broker never reusing a producer id (FM76)"
		r.Fix = fmt.Sprintf("keep --park-after below %s (default 30s), or raise %s", d, cfgExpiration)
		return r
	}
	r.Status = Pass
	return r
}

func verificationRule(b brokerFacts) Result {
	r := Result{Check: cfgVerification, Subject: "cluster"}
	if b.err != nil {
		return notReadable(r.Check, r.Subject, b.err, "DescribeConfigs on the cluster")
	}
	for _, id := range sortedIDs(b.configs) {
		v, ok := b.configs[id][cfgVerification]
		if ok && v == "true" {
			continue
		}
		if !ok {
			v = "not reported"
		}
		r.Status = Warn
		r.Evidence = fmt.Sprintf("broker %d: %s %s: a produce delayed past its transaction's end can join the producer's next transaction "+
			"(a hanging transaction, KIP-890); the epoch fence still refuses an older generation", id, cfgVerification, v)
		r.Fix = cfgVerification + "=true (Apache Kafka 3.6 and later; its default)"
		return r
	}
	r.Status, r.Evidence = Pass, fmt.Sprintf("%s=true on every broker: the partition leaders check a transaction's partitions with its coordinator", cfgVerification)
	return r
}

func sortedIDs(m map[int32]map[string]string) []int32 { return slices.Sorted(maps.Keys(m)) }

func transactionVersionRule(level int16, err error) Result {
	r := Result{Check: "transaction.version", Subject: "cluster", Status: Pass}
	switch {
	case err != nil:
		r.Status, r.Evidence = Warn, fmt.Sprintf("ApiVersions: %v", err)
	case level < 0:
		r.Status = Warn
		r.Evidence = "the cluster reports no finalized transaction.version (a broker before Apache Kafka 3.8, or a Kafka-compatible system): " +
			"the fence rests on InitProducerId's epoch bump alone, which the fence checks exercise"
		r.Fix = "run the fence checks after every broker upgrade; prefer Apache Kafka 3.8 or later"
	case level >= 2:
		r.Evidence = fmt.Sprintf("transaction.version=%d (KIP-890): the coordinator bumps the epoch at every transaction's end "+
			"for clients that speak it; librdkafka (the gateway) speaks the older protocol and keeps one epoch per generation, "+
			"and the checkers accept a generation's later epochs (FM77)", level)
	default:
		r.Evidence = fmt.Sprintf("transaction.version=%d: the classic protocol; a generation keeps one epoch and InitProducerId's bump "+
			"fences the older one, as the gateway's librdkafka producers expect", level)
	}
	return r
}
