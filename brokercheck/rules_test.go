package brokercheck

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// broker is one broker's settings as DescribeConfigs reads them.
func broker(kv ...string) brokerFacts {
	c := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		c[kv[i]] = kv[i+1]
	}
	return brokerFacts{configs: map[int32]map[string]string{1: c}}
}

// TestRules: each settings rule on the values that decide it, including
// the refusals' Unsafe names and where a single broker WARNs rather than
// fails.
func TestRules(t *testing.T) {
	t.Parallel()
	route := func(rf int, unclean, minISR string) topicFacts {
		return topicFacts{name: "shard-output", exists: true, rf: rf, configs: map[string]string{cfgUnclean: unclean, cfgMinISR: minISR}}
	}
	state := func(rf int, minISR string) topicFacts {
		return topicFacts{name: TransactionStateTopic, exists: true, rf: rf, configs: map[string]string{cfgUnclean: "false", cfgMinISR: minISR}}
	}
	denied := errors.New("CLUSTER_AUTHORIZATION_FAILED")
	for _, tc := range []struct {
		name   string
		got    Result
		status Status
		unsafe string
	}{
		{"unclean off", uncleanRule(route(3, "false", "2"), brokerFacts{}), Pass, ""},
		{"unclean on a route topic", uncleanRule(route(3, "true", "2"), brokerFacts{}), Fail, UnsafeUncleanElection},
		{"unclean unreadable", uncleanRule(topicFacts{name: "t", exists: true, configErr: denied}, brokerFacts{}), Warn, ""},
		{"unclean not reported", uncleanRule(topicFacts{name: "t", exists: true, configs: map[string]string{}}, brokerFacts{}), Warn, ""},
		{"route rf 3 min isr 2", replicationRule(route(3, "false", "2"), brokerFacts{}), Pass, ""},
		{"route rf 1: a single broker", replicationRule(route(1, "false", "1"), brokerFacts{}), Warn, ""},
		{"route rf 3 min isr 1", replicationRule(route(3, "false", "1"), brokerFacts{}), Warn, ""},
		{"state rf 3 min isr 2", replicationRule(state(3, "2"), brokerFacts{}), Pass, ""},
		{"state rf 3 min isr 1", replicationRule(state(3, "1"), brokerFacts{}), Fail, UnsafeStateMinISR},
		{"state rf 2 min isr 1", replicationRule(state(2, "1"), brokerFacts{}), Fail, UnsafeStateMinISR},
		{"state rf 2 min isr 2", replicationRule(state(2, "2"), brokerFacts{}), Warn, ""},
		{"state rf 1: a single broker", replicationRule(state(1, "1"), brokerFacts{}), Warn, ""},
		{"state not created yet, brokers' rf 3 min isr 1",
			replicationRule(topicFacts{name: TransactionStateTopic}, broker(cfgStateRF, "3", cfgStateMinISR, "1")), Fail, UnsafeStateMinISR},
		{"max timeout above", maxTimeoutRule(broker(cfgMaxTimeout, "900000"), 10*time.Second), Pass, ""},
		{"max timeout equal", maxTimeoutRule(broker(cfgMaxTimeout, "10000"), 10*time.Second), Pass, ""},
		{"max timeout below", maxTimeoutRule(broker(cfgMaxTimeout, "5000"), 10*time.Second), Fail, UnsafeMaxTimeout},
		{"max timeout unreadable", maxTimeoutRule(brokerFacts{err: denied}, 10*time.Second), Warn, ""},
		{"expiration above park", expirationRule(broker(cfgExpiration, "604800000"), 30*time.Second), Pass, ""},
		{"expiration below park", expirationRule(broker(cfgExpiration, "20000"), 30*time.Second), Warn, ""},
		{"never parked", expirationRule(broker(cfgExpiration, "604800000"), 0), Warn, ""},
		{"verification on", verificationRule(broker(cfgVerification, "true")), Pass, ""},
		{"verification off", verificationRule(broker(cfgVerification, "false")), Warn, ""},
		{"verification not reported", verificationRule(broker()), Warn, ""},
		{"transaction version 2", transactionVersionRule(2, nil), Pass, ""},
		{"transaction version 0", transactionVersionRule(0, nil), Pass, ""},
		{"no transaction version", transactionVersionRule(-1, nil), Warn, ""},
	} {
		if tc.got.Status != tc.status || tc.got.Unsafe != tc.unsafe {
			t.Errorf("%s: %s unsafe %q (%s), want %s unsafe %q", tc.name, tc.got.Status, tc.got.Unsafe, tc.got.Evidence, tc.status, tc.unsafe)
		}
		if tc.got.Status != Pass && tc.got.Fix == "" {
			t.Errorf("%s: a %s without a fix", tc.name, tc.got.Status)
		}
	}
}

// TestRefusedAndAllowed: only a FAIL with an Unsafe name is refused; an
// override names it; a name that is none of the refusals is an error.
func TestRefusedAndAllowed(t *testing.T) {
	t.Parallel()
	results := []Result{
		{Check: "a", Status: Fail, Unsafe: UnsafeUncleanElection},
		{Check: "b", Status: Fail, Unsafe: UnsafeMaxTimeout},
		{Check: "c", Status: Fail},
		{Check: "d", Status: Warn},
	}
	allowed, err := ParseAllowed(" unclean-leader-election ,")
	if err != nil {
		t.Fatal(err)
	}
	refused, overridden := Refused(results, allowed)
	if len(refused) != 1 || refused[0].Check != "b" || len(overridden) != 1 || overridden[0].Check != "a" {
		t.Fatalf("refused %v overridden %v", refused, overridden)
	}
	if _, err := ParseAllowed("unclean-leader-election,unclean"); err == nil || !strings.Contains(err.Error(), `"unclean"`) {
		t.Fatalf("an unknown name: %v", err)
	}
	if !strings.Contains((&RefusalError{Refused: refused}).Error(), "--allow-unsafe-broker="+UnsafeMaxTimeout) {
		t.Fatal("the refusal does not name its override")
	}
}

// TestExitCode: any FAIL is 1, else any ERROR is 2, else 0.
func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		statuses []Status
		want     int
	}{
		{[]Status{Pass, Warn}, ExitPass},
		{[]Status{Pass, Error}, ExitCouldNotRun},
		{[]Status{Error, Fail}, ExitFail},
	} {
		var rep Report
		for _, s := range tc.statuses {
			rep.Results = append(rep.Results, Result{Status: s})
		}
		if got := rep.ExitCode(); got != tc.want {
			t.Errorf("%v: exit %d, want %d", tc.statuses, got, tc.want)
		}
	}
}

// healthyRun is a run whose sends landed as on Apache Kafka: C0 committed
// by producer 1, O left open by it, C1 committed by producer 1 after the
// bump, A1 aborted; and the log and read_committed view of a broker that
// fences.
func healthyRun() (*fenceRun, []logRecord, []logRecord) {
	r := &fenceRun{topic: "scratch", results: map[string]Result{}}
	var log []logRecord
	offset := int64(0)
	add := func(label string, n int, commit bool, marker string) {
		b := r.newBatch("id", label, n, commit)
		for _, m := range b.records {
			b.offsets = append(b.offsets, offset)
			log = append(log, logRecord{offset: offset, producerID: 1, key: m.Key, value: m.Value, headers: kgoHeaders(m.Headers)})
			offset++
		}
		log = append(log, logRecord{offset: offset, producerID: 1, marker: marker})
		offset++
	}
	add("C0", 2, true, "COMMIT")
	add("O", 2, false, "ABORT")
	add("C1", 3, true, "COMMIT")
	add("A1", 2, false, "ABORT")
	var committed []logRecord
	aborted := map[string]bool{"O": true, "A1": true}
	for _, rec := range log {
		if rec.marker != "" || !aborted[labelOf(rec)] {
			committed = append(committed, rec)
		}
	}
	return r, log, committed
}

func kgoHeaders(hs []kafka.Header) []kgo.RecordHeader {
	var out []kgo.RecordHeader
	for _, h := range hs {
		out = append(out, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return out
}

// TestFM103_ReadBackCatchesABrokerThatDoesNotFence: the read-back checks
// pass on what a fencing broker returns and fail, naming the fault, on
// each way a broker (a Kafka-compatible system, a regression after an
// upgrade) can break what the materializer relies on: an aborted
// transaction read_committed, a committed one lost, records reordered or
// a header changed, a marker missing or of the wrong kind.
func TestFM103_ReadBackCatchesABrokerThatDoesNotFence(t *testing.T) {
	t.Parallel()
	r, log, committed := healthyRun()
	r.judge(committed, log)
	for _, c := range []string{checkAborted, checkCommitted, checkMarkers} {
		if r.results[c].Status != Pass {
			t.Fatalf("healthy: %s %s (%s)", c, r.results[c].Status, r.results[c].Evidence)
		}
	}
	for _, tc := range []struct {
		name   string
		check  string
		mutate func(committed, log []logRecord) ([]logRecord, []logRecord)
	}{
		{"the older producer's open transaction read_committed", checkAborted, func(c, l []logRecord) ([]logRecord, []logRecord) {
			return l, l // read_committed returns everything
		}},
		{"an aborted batch read_committed", checkCommitted, func(c, l []logRecord) ([]logRecord, []logRecord) {
			return append(c, l[10]), l // A1's first record
		}},
		{"a committed batch lost", checkCommitted, func(c, l []logRecord) ([]logRecord, []logRecord) {
			return c[:3], l
		}},
		{"committed records reordered", checkCommitted, func(c, l []logRecord) ([]logRecord, []logRecord) {
			c = append([]logRecord(nil), c...)
			c[0], c[1] = c[1], c[0]
			return c, l
		}},
		{"a header changed", checkCommitted, func(c, l []logRecord) ([]logRecord, []logRecord) {
			c = append([]logRecord(nil), c...)
			c[0].headers = append([]kgo.RecordHeader(nil), c[0].headers...)
			c[0].headers[1].Value = []byte{0, 0xff, 0, '\r'}
			return c, l
		}},
		{"a commit marker missing", checkMarkers, func(c, l []logRecord) ([]logRecord, []logRecord) {
			return c, append(append([]logRecord(nil), l[:2]...), l[3:]...)
		}},
		{"an abort where a commit belongs", checkMarkers, func(c, l []logRecord) ([]logRecord, []logRecord) {
			l = append([]logRecord(nil), l...)
			l[9].marker = "ABORT" // C1's marker
			return c, l
		}},
		{"the abort marker of another producer", checkMarkers, func(c, l []logRecord) ([]logRecord, []logRecord) {
			l = append([]logRecord(nil), l...)
			l[5].producerID = 2 // O's marker
			return c, l
		}},
	} {
		r, log, committed := healthyRun()
		c, l := tc.mutate(committed, log)
		r.judge(c, l)
		got := r.results[tc.check]
		if got.Status != Fail {
			t.Errorf("%s: %s %s (%s), want FAIL", tc.name, tc.check, got.Status, got.Evidence)
			continue
		}
		t.Logf("%s: %s FAIL: %s", tc.name, tc.check, got.Evidence)
	}
}

// TestACLRule: the gateway's ACLs of docs/managed-kafka.md pass; one
// missing (or denied) fails; one more than listed warns; no authorizer
// and a certificate principal warn.
func TestACLRule(t *testing.T) {
	t.Parallel()
	cfg := Config{Topics: []string{"shard-output"}, Prefix: "prod"}
	listed := []acl{
		{resource: kmsg.ACLResourceTypeTopic, name: "shard-output", pattern: kmsg.ACLResourcePatternTypeLiteral, op: kmsg.ACLOperationWrite, allow: true},
		{resource: kmsg.ACLResourceTypeTopic, name: "shard-output", pattern: kmsg.ACLResourcePatternTypeLiteral, op: kmsg.ACLOperationDescribe, allow: true},
		{resource: kmsg.ACLResourceTypeTransactionalId, name: "fencegate/prod/", pattern: kmsg.ACLResourcePatternTypePrefixed, op: kmsg.ACLOperationWrite, allow: true},
		{resource: kmsg.ACLResourceTypeTransactionalId, name: "fencegate/prod/", pattern: kmsg.ACLResourcePatternTypePrefixed, op: kmsg.ACLOperationDescribe, allow: true},
	}
	with := func(extra ...acl) []acl { return append(append([]acl(nil), listed...), extra...) }
	for _, tc := range []struct {
		name string
		f    aclFacts
		want Status
	}{
		{"as listed", aclFacts{principal: "User:gateway", acls: listed}, Pass},
		{"no topic Write", aclFacts{principal: "User:gateway", acls: listed[1:]}, Fail},
		{"topic Write denied", aclFacts{principal: "User:gateway", acls: with(acl{resource: kmsg.ACLResourceTypeTopic, name: "*",
			pattern: kmsg.ACLResourcePatternTypeLiteral, op: kmsg.ACLOperationAll})}, Fail},
		{"no ACL at all", aclFacts{principal: "User:gateway"}, Fail},
		{"Read on the topic too", aclFacts{principal: "User:gateway", acls: with(acl{resource: kmsg.ACLResourceTypeTopic, name: "shard-output",
			pattern: kmsg.ACLResourcePatternTypeLiteral, op: kmsg.ACLOperationRead, allow: true})}, Warn},
		{"All on the cluster", aclFacts{principal: "User:gateway", acls: with(acl{resource: kmsg.ACLResourceTypeCluster, name: "kafka-cluster",
			pattern: kmsg.ACLResourcePatternTypeLiteral, op: kmsg.ACLOperationAll, allow: true})}, Warn},
		{"no authorizer", aclFacts{principal: "User:ANONYMOUS", disabled: true}, Warn},
		{"certificate principal", aclFacts{}, Warn},
		{"not describable", aclFacts{principal: "User:gateway", err: errors.New("CLUSTER_AUTHORIZATION_FAILED")}, Warn},
	} {
		if got := aclRule(tc.f, cfg); got.Status != tc.want {
			t.Errorf("%s: %s (%s), want %s", tc.name, got.Status, got.Evidence, tc.want)
		}
	}
}
