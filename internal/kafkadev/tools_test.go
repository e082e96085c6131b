package kafkadev

import "testing"

// TestConsoleLinesAreRead: a line of the console consumer's formatter
// (partition, offset, headers, key, value) is read whole; a line without
// the partition is refused.
func TestConsoleLinesAreRead(t *testing.T) {
	r, err := parseConsoleLine("Partition:3\tOffset:17\tfencegate-lease:shard:1,fencegate-seq:2\tk\tv\tx")
	if err != nil {
		t.Fatal(err)
	}
	if r.Partition != 3 || r.Offset != 17 || r.Key != "k" || r.Value != "v\tx" ||
		r.Headers["fencegate-lease"] != "shard:1" || r.Headers["fencegate-seq"] != "2" {
		t.Fatalf("read %+v", r)
	}
	if _, err := parseConsoleLine("Offset:17\tNO_HEADERS\tk\tv"); err == nil {
		t.Fatal("a line without its partition was read")
	}
}
