package gateway

import (
	"bytes"
	"encoding/base64"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	json "github.com/goccy/go-json"
)

// The JSON produce body: its types, its decoding, and a scanner for the
// values the decoder has already found well formed (records' headers and
// keys and values decoded in place, FM39). The binary body and the
// dispatch between the two are decode.go's; both go through the same
// checks (decode_rules.go).

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
