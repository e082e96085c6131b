package barrier

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// BenchmarkStampBatch stamps the five headers of each record of a
// 100-record batch, as the gateway does per batch (one op = one batch).
func BenchmarkStampBatch(b *testing.B) {
	st := Stamp{Lease: "shard:17", Token: 123456, Owner: "worker-17-0", Batch: "b-000000000042"}
	dst := make([]kafka.Header, 0, 100*DataHeaders)
	b.ReportAllocs()
	for b.Loop() {
		p := st.Stamper()
		dst = dst[:0]
		for i := range 100 {
			dst = p.Append(dst, i)
		}
	}
}

// BenchmarkReadStamp decodes one data record's headers, as the ledger
// does per record.
func BenchmarkReadStamp(b *testing.B) {
	hs := Stamp{Lease: "shard:17", Token: 123456, Owner: "worker-17-0", Batch: "b-000000000042", Seq: 57}.Headers()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadStamp(hs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBarrierSealOpen seals a generation's barrier and opens it
// again, as a handover writes it and the ledger reads it.
func BenchmarkBarrierSealOpen(b *testing.B) {
	s, err := NewSigner([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		b.Fatal(err)
	}
	g := Grant{Lease: "shard:17", Token: 123456, Owner: "worker-17-0", TransactionalID: "fg-shard:17",
		ProducerID: 4242, Epoch: 7, IssuedAt: time.Unix(1700000000, 0).UTC()}
	b.ReportAllocs()
	for b.Loop() {
		v, err := s.Seal(g)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Open(v); err != nil {
			b.Fatal(err)
		}
	}
}
