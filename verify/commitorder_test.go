package verify

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/barrier"
)

// logOf builds a partition log from a compact script, one entry per
// offset: "B<token>/<pid>.<epoch>" a barrier, "D<token>/<pid>.<epoch>" a
// data record, "C<pid>" and "A<pid>" a commit or abort marker,
// "N<token>" a non-transactional data record and "M<pid>" a rollout
// marker. Lease "l" throughout.
func logOf(t *testing.T, script ...string) []LogRecord {
	t.Helper()
	out := make([]LogRecord, len(script))
	for off, s := range script {
		r := LogRecord{Offset: int64(off), Transactional: true}
		var token, pid, epoch int64
		switch s[0] {
		case 'B', 'D':
			mustScan(t, s[1:], "%d/%d.%d", &token, &pid, &epoch)
			r.Stamp = barrier.Stamp{Lease: "l", Token: token, Owner: "o", Batch: "b", Barrier: s[0] == 'B'}
			r.ProducerID, r.ProducerEpoch = pid, int16(epoch)
		case 'C', 'A':
			mustScan(t, s[1:], "%d", &pid)
			r.Control, r.Commit, r.ProducerID = true, s[0] == 'C', pid
		case 'M':
			mustScan(t, s[1:], "%d", &pid)
			r.Marker, r.ProducerID = true, pid
		case 'N':
			mustScan(t, s[1:], "%d", &token)
			r.Stamp = barrier.Stamp{Lease: "l", Token: token, Owner: "o", Batch: "b"}
			r.Transactional = false
		}
		out[off] = r
	}
	return out
}

func mustScan(t *testing.T, s, format string, args ...any) {
	t.Helper()
	if _, err := fmt.Sscanf(s, format, args...); err != nil {
		t.Fatalf("script %q: %v", s, err)
	}
}

func TestCommitOrder(t *testing.T) {
	cases := []struct {
		name   string
		script []string
		want   string // substring of the first violation; "" for none
	}{
		{"two generations in order", []string{"B1/7.0", "C7", "D1/7.0", "C7", "B2/7.1", "C7", "D2/7.1", "C7"}, ""},
		{"old transaction committed before the new barrier", []string{"B1/7.0", "C7", "D1/7.0", "C7", "B2/8.0", "C8", "D2/8.0", "C8"}, ""},
		{"aborted old transaction after the new barrier", []string{"B1/7.0", "C7", "D1/7.0", "B2/8.0", "C8", "A7"}, ""},
		// The case an offset-order check passes: the records of token 1
		// precede the barrier of token 2, their commit marker follows it.
		{"old transaction committed after the new barrier", []string{"B1/7.0", "C7", "D1/7.0", "B2/8.0", "C8", "C7"}, "committed at 5, after the barrier of token 2"},
		// Transaction version 2: the coordinator bumps the epoch at each
		// commit, so a generation's later transactions carry later epochs.
		{"epoch bumped by commits inside a generation (TV2)", []string{"B1/7.0", "C7", "D1/7.1", "C7", "D1/7.2", "C7", "B2/7.4", "C7", "D2/7.5", "C7"}, ""},
		{"epoch below its barrier's", []string{"B1/7.2", "C7", "D1/7.1", "C7"}, "from producer 7 epoch 1; its barrier names 7 epoch 2"},
		{"old token from a later generation's producer", []string{"B1/7.0", "C7", "B2/7.3", "C7", "D1/7.3", "C7"}, "from producer 7 epoch 3; its barrier names 7 epoch 0"},
		{"another producer inside a generation", []string{"B1/7.0", "C7", "D1/8.0", "C8"}, "from producer 8 epoch 0; its barrier names 7 epoch 0"},
		{"data before its barrier", []string{"D1/7.0", "C7", "B1/7.0", "C7"}, "without its generation's barrier before it"},
		{"data without a committed barrier", []string{"B1/7.0", "A7", "D1/7.0", "C7"}, "without its generation's barrier"},
		{"non-transactional record", []string{"B1/7.0", "C7", "N1"}, "non-transactional"},
		{"a rollout marker committed between generations", []string{"B1/7.0", "C7", "M9", "C9", "D1/7.0", "C7", "B2/7.1", "C7"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vs := CommitOrder(logOf(t, c.script...))
			switch {
			case c.want == "" && len(vs) > 0:
				t.Fatalf("violations on a clean log: %v", vs)
			case c.want != "" && len(vs) == 0:
				t.Fatalf("no violation, want %q", c.want)
			case c.want != "" && !strings.Contains(vs[0].Detail, c.want):
				t.Fatalf("violation %v, want %q", vs[0], c.want)
			}
		})
	}
}
