package barrier

import (
	"fmt"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// FuzzStampRoundTrip: the header codec is one wire format. A valid stamp
// decodes to itself; an invalid one (no lease, token <= 0, a data record
// without owner, batch or seq) is refused, never guessed.
func FuzzStampRoundTrip(f *testing.F) {
	f.Add("shard:1", int64(7), "o1", "b-1", 3, false, false)
	f.Add("shard:1", int64(7), "o1", "b-1", 3, false, true)
	f.Add("shard:1", int64(7), "o1", "", -1, true, false)
	f.Add("shard:1", int64(7), "o1", "", -1, true, true)
	f.Add("", int64(1), "o", "b", 0, false, false)
	f.Add("l", int64(0), "o", "b", 0, false, false)
	f.Add("l", int64(9), "", "b", 0, false, true)
	f.Fuzz(func(t *testing.T, lease string, token int64, owner, batch string, seq int, isBarrier, isCheckpoint bool) {
		s := Stamp{Lease: lease, Token: token, Owner: owner, Batch: batch, Seq: seq, Barrier: isBarrier, Checkpoint: isCheckpoint}
		if isBarrier {
			s.Batch, s.Seq = "", -1 // a barrier carries neither
		}
		valid := lease != "" && token > 0 && !(isBarrier && isCheckpoint) &&
			(isBarrier || owner != "" && batch != "" && seq >= 0)
		got, err := ReadStamp(s.Headers())
		switch {
		case valid && err != nil:
			t.Fatalf("valid stamp %+v refused: %v", s, err)
		case valid && got != s:
			t.Fatalf("round trip changed %+v into %+v", s, got)
		case !valid && err == nil:
			t.Fatalf("invalid stamp %+v accepted as %+v", s, got)
		}
	})
}

func TestReservedIgnoresCase(t *testing.T) {
	for name, want := range map[string]bool{"fencegate-token": true, "FenceGate-X": true, "FENCEGATE-": true,
		"fencegate": false, "x-fencegate-token": false, "": false, "app": false} {
		if Reserved(name) != want {
			t.Errorf("Reserved(%q) = %v, want %v", name, !want, want)
		}
	}
}

// TestStamperMatchesHeaders: a batch's records stamped by one Stamper
// carry exactly the headers each record's own Stamp encodes, and reading
// them back gives each record its own seq (the shared values are not
// overwritten by later records).
func TestStamperMatchesHeaders(t *testing.T) {
	st := Stamp{Lease: "shard:1", Token: 77, Owner: "w-1", Batch: "b-9"}
	p := st.Stamper()
	var all [][]kafka.Header
	for seq := range 1200 {
		all = append(all, p.Append([]kafka.Header{{Key: "app", Value: []byte("x")}}, seq))
	}
	for seq, hs := range all {
		st.Seq = seq
		want := append([]kafka.Header{{Key: "app", Value: []byte("x")}}, st.Headers()...)
		if fmt.Sprint(hs) != fmt.Sprint(want) {
			t.Fatalf("seq %d: %v, want %v", seq, hs, want)
		}
		got, err := ReadStamp(hs)
		if err != nil || got != st {
			t.Fatalf("seq %d read back as %+v, %v", seq, got, err)
		}
	}
}

// TestCheckpointTypeRoundTrip: a checkpoint's type (STRING, JSON) travels
// in its own header and decodes to itself; BINARY adds no header; a type
// on a record that is not a checkpoint, or another type, is refused.
func TestCheckpointTypeRoundTrip(t *testing.T) {
	base := Stamp{Lease: "shard:1", Token: 7, Owner: "o1", Batch: "b-1", Seq: 2, Checkpoint: true}
	for _, kind := range []string{"", "STRING", "JSON"} {
		s := base
		s.CheckpointType = kind
		got, err := ReadStamp(s.Headers())
		if err != nil || got != s {
			t.Errorf("type %q: read %+v, %v", kind, got, err)
		}
		if n := len(s.Headers()); n != DataHeaders+1+min(len(kind), 1) {
			t.Errorf("type %q: %d headers", kind, n)
		}
	}
	for name, s := range map[string]Stamp{
		"unknown type":   {Lease: "l", Token: 1, Owner: "o", Batch: "b", Seq: 0, Checkpoint: true, CheckpointType: "XML"},
		"not checkpoint": {Lease: "l", Token: 1, Owner: "o", Batch: "b", Seq: 0, CheckpointType: "JSON"},
	} {
		hs := append(s.Headers(), kafka.Header{Key: HeaderCheckpointType, Value: []byte(s.CheckpointType)})
		if _, err := ReadStamp(hs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
