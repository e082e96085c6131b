package baseline

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/verify"
)

// TestBareHandoversCommitOneRecordEach: every handover the yardstick
// counts is a new producer whose one-record transaction committed: the
// committed records of its topic are exactly the handovers counted.
func TestBareHandoversCommitOneRecordEach(t *testing.T) {
	t.Parallel()
	if kafkatest.External() {
		t.Skip("the yardstick writes to its fixed topic, made on the in-process broker only")
	}
	k := kafkatest.Start(t, stack.DirectTopic, stack.Partitions)
	f, err := RunBareHandovers(context.Background(), k.Conn, Child{Mode: ModeHandover, Producers: 2, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if f.Handovers == 0 || f.Loops != 2 {
		t.Fatalf("figures %+v", f)
	}
	var committed int64
	for p := range int32(stack.Partitions) {
		recs, err := verify.ReadPartition(k.Conn, stack.DirectTopic, p, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		committed += int64(len(recs))
	}
	if committed != f.Handovers {
		t.Errorf("%d handovers counted, %d records committed", f.Handovers, committed)
	}
}
