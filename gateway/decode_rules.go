package gateway

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
)

// The rules a batch and its records are held to, whichever body (JSON or
// binary) carried them: owner, batch id and record count, checkpoint size,
// header count, bytes and repetition, and which headers the ledger can
// keep (FM29, FM39).

const batchIDRule = "batch_id is required: 1..255 bytes of UTF-8 without control characters"

// checkBatch holds a batch's owner, batch id and record count to the
// rules, whichever body carried them (the token was checked on decoding).
func checkBatch(req ProduceRequest, records int, lim Limits) *Error {
	if err := checkOwner(req.Owner); err != nil {
		return err
	}
	if req.BatchID == "" || len(req.BatchID) > 255 || !utf8.ValidString(req.BatchID) || strings.ContainsFunc(req.BatchID, isControl) {
		return errorf(CodeInvalidRequest, batchIDRule)
	}
	if records == 0 {
		return errorf(CodeInvalidRequest, "records must hold at least one record")
	}
	if records > lim.MaxRecords {
		return errorf(CodePayloadTooLarge, "%d records exceed the limit of %d per batch", records, lim.MaxRecords)
	}
	return nil
}

// checkCheckpoint holds a batch's checkpoint to its size limit, whichever
// body carried it (wire.Decode checks it too, before slicing).
func checkCheckpoint(c []byte, lim Limits) *Error {
	if len(c) > lim.MaxCheckpointBytes {
		return errorf(CodePayloadTooLarge, "checkpoint of %d bytes exceeds the limit of %d", len(c), lim.MaxCheckpointBytes)
	}
	return nil
}

// checkRecord holds one record to the header and size rules, in time
// linear in its headers: their count and bytes are checked first (the
// decoders have counted them already; this holds a Record built any other
// way to the same limits), then each header once. seen is scratch space
// that the records of a batch share.
func checkRecord(r Record, lim Limits, seen *headerSet) *Error {
	if len(r.Headers) > lim.MaxHeaders {
		return errorf(CodePayloadTooLarge, "%d headers exceed the limit of %d per record", len(r.Headers), lim.MaxHeaders)
	}
	hsize := 0
	for _, h := range r.Headers {
		hsize += len(h.Key) + len(h.Value)
	}
	if hsize > lim.MaxHeaderBytes {
		return errorf(CodePayloadTooLarge, "headers of %d bytes exceed the limit of %d per record", hsize, lim.MaxHeaderBytes)
	}
	if size := len(r.Key) + len(r.Value) + hsize; size > lim.MaxRecordBytes {
		return errorf(CodePayloadTooLarge, "record of %d bytes exceeds the limit of %d", size, lim.MaxRecordBytes)
	}
	seen.reset(len(r.Headers))
	for i, h := range r.Headers {
		if h.Key == "" || barrier.Reserved(h.Key) {
			return errorf(CodeInvalidRequest, "header %q: empty names and the %q prefix are reserved", h.Key, barrier.ReservedPrefix)
		}
		if !keepable(h) {
			return errorf(CodeInvalidRequest, "header %q: names and values must be UTF-8 without U+0000", h.Key)
		}
		if seen.repeated(r.Headers[:i], h.Key) {
			return errorf(CodeInvalidRequest, "header %q appears twice", h.Key)
		}
	}
	return nil
}

// headerSet finds a repeated header name in linear time: a few headers are
// compared with each other (no allocation), more go through a map that
// the records of a batch reuse. Comparing every name with every earlier
// one made 40,000 headers cost 3 s of CPU (FM39).
type headerSet struct {
	names map[string]struct{}
	big   bool
}

// fewHeaders is the most headers compared pairwise (at most 28
// comparisons).
const fewHeaders = 8

func (s *headerSet) reset(n int) {
	s.big = n > fewHeaders
	if !s.big {
		return
	}
	if s.names == nil {
		s.names = make(map[string]struct{}, n)
	}
	clear(s.names)
}

// repeated says whether name is among earlier, the record's headers
// before it, and records it.
func (s *headerSet) repeated(earlier []kafka.Header, name string) bool {
	if !s.big {
		for _, e := range earlier {
			if e.Key == name {
				return true
			}
		}
		return false
	}
	if _, ok := s.names[name]; ok {
		return true
	}
	s.names[name] = struct{}{}
	return false
}

// keepable is the gateway's one rule for which headers the ledger keeps
// byte-exact, whichever body carried them: the ledger stores a record's
// headers as jsonb strings, which cannot hold U+0000 (Postgres refuses
// the record: before this rule, one such header halted the ledger) and
// cannot hold bytes that are not UTF-8 (they would come back as U+FFFD).
// Keys and values are bytea and may be any bytes.
func keepable(h kafka.Header) bool {
	return utf8.ValidString(h.Key) && strings.IndexByte(h.Key, 0) < 0 &&
		utf8.Valid(h.Value) && bytes.IndexByte(h.Value, 0) < 0
}
