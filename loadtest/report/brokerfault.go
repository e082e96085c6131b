package report

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// BrokerFaults are what the run did to its three-node Apache Kafka
// cluster (--kafka-cluster --broker-fault-every) and how the fleet came
// back after each fault: the cluster whole again (every partition of the
// lease topic and of __transaction_state led, its ISR full), then every
// lease served again within one TTL of that. The TTL bounds fencegate's
// recovery, not a JVM's restart, so the clock starts when the cluster is
// whole.
type BrokerFaults struct {
	// Broker names the cluster (Apache Kafka 4.4, three KRaft nodes,
	// replication factor 3, min ISR 2).
	Broker       string  `json:"broker"`
	EverySeconds float64 `json:"every_s"`
	// Rounds are complete passes over the kinds; Faults counts the faults
	// by kind.
	Rounds int            `json:"rounds"`
	Faults map[string]int `json:"faults"`
	// WholeMaxSeconds is the longest time from a fault's start to the
	// cluster whole again; ServedMaxSeconds the longest time from then to
	// every lease's next acknowledged batch.
	WholeMaxSeconds  float64 `json:"whole_max_s"`
	ServedMaxSeconds float64 `json:"served_max_s"`
	TTLSeconds       float64 `json:"ttl_s"`
	// The findings, each a failure: faults after which some lease was
	// not served within one TTL of the cluster being whole (NotServed),
	// after which the cluster never became whole (NotWhole), and faults
	// that could not be applied (Errors, e.g. no coordinator found).
	NotServed int `json:"not_served"`
	// Late says, for the first of the faults NotServed counts, which
	// leases were late and when every lease was served.
	Late     []string `json:"late,omitempty"`
	NotWhole int      `json:"not_whole"`
	Errors   []string `json:"errors,omitempty"`
	// NotJudged counts faults the run's end interrupted before their
	// judgement: a figure, not a verdict.
	NotJudged int `json:"not_judged"`
	// KafkaRead counts the records Kafka's own console consumer read
	// (read_committed) after the run, every partition from the start;
	// KafkaReadDiffers says where what it read differs from what
	// fencegate's reader read (on which every check above was made): each
	// a failure.
	KafkaRead        int      `json:"kafka_read"`
	KafkaReadDiffers []string `json:"kafka_read_differs,omitempty"`
}

// Pass says whether every fault was applied and recovered from.
func (b *BrokerFaults) Pass() bool {
	return b == nil || (b.NotServed == 0 && b.NotWhole == 0 && len(b.Errors) == 0 && faultCount(b.Faults) > 0 && len(b.KafkaReadDiffers) == 0)
}

func faultCount(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// write writes the faults' line, with the history's unknown answers and
// how the reading resolved them (landed or not).
func (b *BrokerFaults) write(w io.Writer, h History) {
	if b == nil {
		return
	}
	kinds := make([]string, 0, len(b.Faults))
	for k, n := range b.Faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	fmt.Fprintf(w, "broker faults on %s, one every %.0fs after the last was judged: %d rounds, %d faults (%s); cluster whole again at most %.1fs after a fault's start, every lease served again at most %.2fs after that (TTL %.1fs); "+
		"not served within one TTL %d, never whole %d, not applied %d, not judged %d; unknown answers %d: %d landed, %d did not (read back)\n",
		b.Broker, b.EverySeconds, b.Rounds, faultCount(b.Faults), strings.Join(kinds, ", "), b.WholeMaxSeconds, b.ServedMaxSeconds, b.TTLSeconds,
		b.NotServed, b.NotWhole, len(b.Errors), b.NotJudged, h.Unknown, h.UnknownLanded, h.Unknown-h.UnknownLanded)
	fmt.Fprintf(w, "Kafka's console consumer (read_committed) read %d records after the run; where it differs from fencegate's reader: %d partitions\n", b.KafkaRead, len(b.KafkaReadDiffers))
	for _, e := range slices.Concat(b.Errors, b.Late, b.KafkaReadDiffers) {
		fmt.Fprintf(w, "- %s\n", e)
	}
}
