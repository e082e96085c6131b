package gateway

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	json "github.com/goccy/go-json"
	"io"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/client/wire"
	"github.com/fencegate/fencegate/txnmap"
)

// The decoder is goccy/go-json, a drop-in for encoding/json that decodes a
// 100 x 1 KiB batch 2.5x faster (BenchmarkDecodeProduce: 3.6 ms -> 1.4 ms),
// raising end-to-end gateway throughput by about 40%. Its behaviour on bad
// input is pinned by TestFM19_* and the FuzzFM19_* targets; what a
// refusal says is refusal's (decode_errors.go), which reads only refused
// bodies again, once, in time linear in their size.

// Request bodies as sent. Pointers tell "missing" from "zero". Unknown
// fields are refused, so a worker cannot smuggle a topic or partition.
type acquireBody struct {
	Name    *string `json:"name"`
	OwnerID *string `json:"owner_id"`
	TTLMS   *int64  `json:"ttl_ms"`
	Token   *int64  `json:"token"`
}

type renewBody struct {
	OwnerID *string `json:"owner_id"`
	Token   *int64  `json:"token"`
	TTLMS   *int64  `json:"ttl_ms"`
}

type produceBody struct {
	OwnerID *string      `json:"owner_id"`
	Token   *int64       `json:"token"`
	BatchID *string      `json:"batch_id"`
	Records []recordBody `json:"records"`
	// Checkpoint is encoded like a record value; absent or null is none.
	Checkpoint *encoded `json:"checkpoint"`
}

type recordBody struct {
	Key   *encoded `json:"key"`
	Value *encoded `json:"value"`
	// Headers is decoded by decodeJSONHeaders, which counts them as it
	// goes: a map would be built whole, however many the body holds,
	// before any limit could be checked.
	Headers rawValue `json:"headers"`
}

// encoded is a key or value in the Confluent REST Proxy v3 habit:
// {"type": "BINARY", "data": "<base64>"}, "STRING" or "JSON".
type encoded struct {
	Type string   `json:"type"`
	Data rawValue `json:"data"`
}

// rawValue is a JSON value kept as its bytes. The decoder hands
// UnmarshalJSON a copy of its own (goccy/go-json copies every value it
// passes to an Unmarshaler), so keeping that slice is the one copy:
// json.RawMessage would copy it a second time, and a 16 MiB value cost
// 32 MiB before it was decoded (FM39).
type rawValue []byte

// UnmarshalJSON keeps b, which the decoder gives to no one else.
func (r *rawValue) UnmarshalJSON(b []byte) error { *r = b; return nil }

// readBody reads at most limit bytes; more is 413. A declared length above
// the limit is refused before reading. The buffer grows with the bytes that
// arrive, never with the declared length: a client that declares 16 MiB
// and sends a few bytes holds at most firstBuffer. A body of the declared
// length up to firstBuffer is read into one allocation, never copied.
// reserve is asked for the buffer's capacity before each allocation; a
// refusal is too_many_requests (the caller names the budget).
func readBody(r io.Reader, declared int64, limit int, reserve func(int) bool) ([]byte, *Error) {
	if declared > int64(limit) {
		return nil, errorf(CodePayloadTooLarge, "request body exceeds %d bytes", limit)
	}
	// One byte more than declared, to meet the end without growing.
	first := int(min(max(declared, 512), firstBuffer) + 1)
	if !reserve(first) {
		return nil, errorf(CodeTooManyRequests, "request body budget")
	}
	buf := make([]byte, 0, first)
	for {
		if len(buf) == cap(buf) {
			// Double, but never past the declared length (the body ends
			// there) nor the limit; exactly that capacity is reserved.
			n := len(buf) + min(cap(buf), limit+1-len(buf))
			if declared > int64(len(buf)) {
				n = min(n, int(declared)+1)
			}
			if !reserve(n) {
				return nil, errorf(CodeTooManyRequests, "request body budget")
			}
			buf = append(make([]byte, 0, n), buf...)
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return nil, errorf(CodePayloadTooLarge, "request body exceeds %d bytes", limit)
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, errorf(CodeInvalidRequest, "reading body: %v", err)
		}
	}
}

// firstBuffer is the most readBody allocates before bytes arrive: a batch
// of 100 x 1 KiB (about 104 KiB binary, 140 KiB JSON) fits; larger bodies
// grow by doubling.
const firstBuffer = 256 << 10

// strictJSON decodes exactly one JSON object into v, refusing unknown
// fields and trailing data, and a body that is not UTF-8 (RFC 8259
// requires it): the decoder would turn such bytes into U+FFFD, so a
// header, a STRING key or value, would reach the ledger rewritten.
func strictJSON(b []byte, v any) *Error {
	if !utf8.Valid(b) {
		return errorf(CodeInvalidRequest, "malformed JSON: not UTF-8 at byte %d", invalidAt(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return refused(b, v, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errorf(CodeInvalidRequest, "malformed JSON: data after the object")
	}
	return nil
}

// invalidAt is the offset of the first byte of b that is not UTF-8.
func invalidAt(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// refused is the answer to a body b that the decoder refused with err
// when decoding into v: refusal's words, or the decoder's when refusal
// finds nothing wrong.
func refused(b []byte, v any, err error) *Error {
	msg := refusal(b, reflect.TypeOf(v))
	if msg == "" {
		msg = "malformed JSON: " + err.Error()
	}
	return errorf(CodeInvalidRequest, "%s", msg)
}

func decodeAcquire(b []byte) (AcquireRequest, *Error) {
	var body acquireBody
	if err := strictJSON(b, &body); err != nil {
		return AcquireRequest{}, err
	}
	if body.Name == nil {
		return AcquireRequest{}, errorf(CodeInvalidRequest, "name is required")
	}
	if err := txnmap.ValidateName(*body.Name); err != nil {
		return AcquireRequest{}, errorf(CodeInvalidRequest, "name: %v", err)
	}
	owner, ttl, err := ownerAndTTL(body.OwnerID, body.TTLMS)
	if err != nil {
		return AcquireRequest{}, err
	}
	req := AcquireRequest{Name: *body.Name, Owner: owner, TTL: ttl}
	if body.Token != nil {
		if *body.Token <= 0 {
			return AcquireRequest{}, errorf(CodeInvalidRequest, "token must be a positive integer")
		}
		req.Token = *body.Token
	}
	return req, nil
}

func decodeRenew(b []byte) (owner string, token int64, ttl time.Duration, e *Error) {
	var body renewBody
	if err := strictJSON(b, &body); err != nil {
		return "", 0, 0, err
	}
	owner, ttl, e = ownerAndTTL(body.OwnerID, body.TTLMS)
	if e != nil {
		return "", 0, 0, e
	}
	token, e = requireToken(body.Token)
	return owner, token, ttl, e
}

func ownerAndTTL(owner *string, ttlMS *int64) (string, time.Duration, *Error) {
	if owner == nil {
		return "", 0, errorf(CodeInvalidRequest, "owner_id is required")
	}
	if err := checkOwner(*owner); err != nil {
		return "", 0, err
	}
	if ttlMS == nil {
		return "", 0, errorf(CodeInvalidRequest, "ttl_ms is required")
	}
	// Bounds are the store's to judge; this only keeps the multiplication
	// from overflowing.
	if *ttlMS <= 0 || *ttlMS > int64(365*24*time.Hour/time.Millisecond) {
		return "", 0, errorf(CodeInvalidRequest, "ttl_ms %d is out of range", *ttlMS)
	}
	return *owner, time.Duration(*ttlMS) * time.Millisecond, nil
}

func checkOwner(owner string) *Error {
	if owner == "" || len(owner) > 255 || !utf8.ValidString(owner) || strings.ContainsFunc(owner, isControl) {
		return errorf(CodeInvalidRequest, "owner_id must be 1..255 bytes of UTF-8 without control characters")
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }

func requireToken(t *int64) (int64, *Error) {
	if t == nil {
		return 0, errorf(CodeInvalidRequest, "token is required")
	}
	if *t <= 0 {
		return 0, errorf(CodeInvalidRequest, "token must be a positive integer")
	}
	return *t, nil
}

// decodeProduce decodes a produce body: the binary batch (wire.ContentType,
// what the SDK sends) or JSON. Both go through the same checks.
func decodeProduce(b []byte, contentType, name string, lim Limits) (ProduceRequest, *Error) {
	if isBinaryBatch(contentType) {
		return decodeBinaryProduce(b, name, lim)
	}
	return decodeJSONProduce(b, name, lim)
}

// isBinaryBatch reports whether a Content-Type names the binary batch
// (parameters ignored); anything else is read as JSON, as before the
// binary body existed (curl -d sends a form type).
func isBinaryBatch(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), wire.ContentType)
}

func decodeJSONProduce(b []byte, name string, lim Limits) (ProduceRequest, *Error) {
	var body produceBody
	if err := strictJSON(b, &body); err != nil {
		return ProduceRequest{}, err
	}
	if body.OwnerID == nil {
		return ProduceRequest{}, errorf(CodeInvalidRequest, "owner_id is required")
	}
	token, err := requireToken(body.Token)
	if err != nil {
		return ProduceRequest{}, err
	}
	if body.BatchID == nil {
		return ProduceRequest{}, errorf(CodeInvalidRequest, batchIDRule)
	}
	req := ProduceRequest{Name: name, Owner: *body.OwnerID, Token: token, BatchID: *body.BatchID}
	if err := checkBatch(req, len(body.Records), lim); err != nil {
		return ProduceRequest{}, err
	}
	if req.Checkpoint, err = body.Checkpoint.bytes("checkpoint"); err != nil {
		return ProduceRequest{}, err
	}
	if body.Checkpoint != nil && body.Checkpoint.Type != "BINARY" {
		req.CheckpointType = body.Checkpoint.Type // kept, so that a read gives it back as written
	}
	if err := checkCheckpoint(req.Checkpoint, lim); err != nil {
		return ProduceRequest{}, err
	}
	req.Records = make([]Record, len(body.Records))
	var seen headerSet
	for i := range body.Records {
		r, err := decodeRecord(body.Records[i], lim)
		if err == nil {
			err = checkRecord(r, lim, &seen)
		}
		if err != nil {
			err.Detail = fmt.Sprintf("records[%d]: %s", i, err.Detail)
			return ProduceRequest{}, err
		}
		// The record's bytes are decoded (or alias the body): drop the
		// raw JSON as we go, so it is not held twice until the end.
		body.Records[i] = recordBody{}
		req.Records[i] = r
	}
	return req, nil
}

func decodeBinaryProduce(b []byte, name string, lim Limits) (ProduceRequest, *Error) {
	batch, derr := wire.Decode(b, lim.wire())
	switch {
	case errors.Is(derr, wire.ErrTooLarge):
		return ProduceRequest{}, errorf(CodePayloadTooLarge, "%v", derr)
	case derr != nil:
		return ProduceRequest{}, errorf(CodeInvalidRequest, "malformed %s body: %v", wire.ContentType, derr)
	}
	req := ProduceRequest{Name: name, Owner: batch.OwnerID, Token: batch.Token, BatchID: batch.BatchID,
		Checkpoint: batch.Checkpoint}
	if err := checkBatch(req, len(batch.Records), lim); err != nil {
		return ProduceRequest{}, err
	}
	if err := checkCheckpoint(req.Checkpoint, lim); err != nil {
		return ProduceRequest{}, err
	}
	req.Records = make([]Record, len(batch.Records))
	var arena []kafka.Header // the batch's headers in one growing allocation
	var seen headerSet
	for i, wr := range batch.Records {
		start := len(arena)
		for _, h := range wr.Headers {
			arena = append(arena, kafka.Header{Key: h.Name, Value: h.Value})
		}
		r := Record{Key: wr.Key, Value: wr.Value, Headers: arena[start:len(arena):len(arena)]}
		if err := checkRecord(r, lim, &seen); err != nil {
			err.Detail = fmt.Sprintf("records[%d]: %s", i, err.Detail)
			return ProduceRequest{}, err
		}
		req.Records[i] = r
	}
	return req, nil
}

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

// decodeRecord decodes a JSON record's key, value and headers.
func decodeRecord(rb recordBody, lim Limits) (Record, *Error) {
	hs, err := decodeJSONHeaders(rb.Headers, lim)
	if err != nil {
		return Record{}, err
	}
	key, err := rb.Key.bytes("key")
	if err != nil {
		return Record{}, err
	}
	value, err := rb.Value.bytes("value")
	if err != nil {
		return Record{}, err
	}
	return Record{Key: key, Value: value, Headers: hs}, nil
}

// decodeJSONHeaders decodes a record's "headers" object of strings in
// order, one pass, counting as it goes: more than lim.MaxHeaders headers,
// or names and values of more than lim.MaxHeaderBytes, are refused at the
// header that passes the limit, before the rest is read. A repeated name
// is kept for checkRecord to refuse (a map would keep the last silently).
func decodeJSONHeaders(raw rawValue, lim Limits) ([]kafka.Header, *Error) {
	p := jsonScan{b: raw}
	p.space()
	if p.done() || p.literal("null") {
		return nil, nil
	}
	bad := errorf(CodeInvalidRequest, "headers must be an object of string values")
	if !p.byte('{') {
		bad.Detail += ", got " + describeRaw(raw)
		return nil, bad
	}
	var hs []kafka.Header
	size := 0
	for first := true; ; first = false {
		p.space()
		if p.byte('}') {
			break
		}
		if !first && !p.byte(',') {
			return nil, bad
		}
		p.space()
		name, ok := p.str()
		p.space()
		if !ok || !p.byte(':') {
			return nil, bad
		}
		p.space()
		at := p.i
		value, ok := p.str()
		if !ok {
			bad.Detail += fmt.Sprintf(", got %s for %q", describeRaw(raw[at:]), name)
			return nil, bad
		}
		if len(hs) == lim.MaxHeaders {
			return nil, errorf(CodePayloadTooLarge, "more than %d headers in a record, the limit", lim.MaxHeaders)
		}
		if size += len(name) + len(value); size > lim.MaxHeaderBytes {
			return nil, errorf(CodePayloadTooLarge, "headers of more than %d bytes in a record, the limit", lim.MaxHeaderBytes)
		}
		hs = append(hs, kafka.Header{Key: string(name), Value: value})
	}
	p.space()
	if !p.done() {
		return nil, bad
	}
	return hs, nil
}

// jsonScan reads a JSON value that the decoder has already found well
// formed, front to back.
type jsonScan struct {
	b []byte
	i int
}

func (p *jsonScan) done() bool { return p.i >= len(p.b) }

func (p *jsonScan) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *jsonScan) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *jsonScan) literal(s string) bool {
	if bytes.HasPrefix(p.b[p.i:], []byte(s)) {
		p.i += len(s)
		return true
	}
	return false
}

// str reads a JSON string and returns its decoded bytes: the bytes
// themselves when it has no escape and no control character (they alias
// the raw value), else what the JSON decoder makes of it.
func (p *jsonScan) str() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start, plain := p.i, true
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i:p.i]
			p.i++
			if plain {
				return s, true
			}
			var out string
			if json.Unmarshal(p.b[start-1:p.i], &out) != nil {
				return nil, false
			}
			return []byte(out), true
		case c == '\\':
			plain = false
			p.i++ // the escaped byte cannot end the string
		case c < 0x20:
			plain = false
		}
	}
	return nil, false
}

// bytes decodes a key or value; nil (absent or JSON null) stays nil.
func (e *encoded) bytes(field string) ([]byte, *Error) {
	if e == nil {
		return nil, nil
	}
	if len(e.Data) == 0 {
		return nil, errorf(CodeInvalidRequest, "%s.data is required", field)
	}
	// A string without escapes is decoded from the raw bytes in place:
	// no copy of it as a Go string first (FM39).
	p := jsonScan{b: e.Data}
	s, ok := p.str()
	ok = ok && p.done()
	if string(e.Data) == "null" { // decoded as an empty string, as before
		s, ok = []byte{}, true
	}
	switch e.Type {
	case "BINARY":
		if !ok {
			return nil, errorf(CodeInvalidRequest, "%s.data must be a base64 string, got %s", field, describeRaw(e.Data))
		}
		b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
		n, err := base64.StdEncoding.Decode(b, s)
		if err != nil {
			return nil, errorf(CodeInvalidRequest, "%s.data is not valid base64", field)
		}
		return b[:n:n], nil
	case "STRING":
		if !ok {
			return nil, errorf(CodeInvalidRequest, "%s.data must be a string, got %s", field, describeRaw(e.Data))
		}
		return s, nil
	case "JSON":
		var buf bytes.Buffer
		if err := json.Compact(&buf, e.Data); err != nil {
			return nil, errorf(CodeInvalidRequest, "%s.data is not valid JSON", field)
		}
		return buf.Bytes(), nil
	}
	if e.Type == "" {
		return nil, errorf(CodeInvalidRequest, "%s.type is required: BINARY, STRING or JSON", field)
	}
	return nil, errorf(CodeInvalidRequest, "%s.type must be BINARY, STRING or JSON, got %s", field, describe(e.Type))
}
