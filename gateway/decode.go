package gateway

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	json "github.com/goccy/go-json"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/txnmap"
)

// The decoder is goccy/go-json, a drop-in for encoding/json that decodes a
// 100 x 1 KiB batch 2.5x faster (BenchmarkDecodeProduce: 3.6 ms -> 1.4 ms),
// raising end-to-end gateway throughput by about 40%. Its behaviour on bad
// input is pinned by TestFM19_* and the FuzzFM19_* targets.

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
}

type recordBody struct {
	Key     *encoded          `json:"key"`
	Value   *encoded          `json:"value"`
	Headers map[string]string `json:"headers"`
}

// encoded is a key or value in the Confluent REST Proxy v3 habit:
// {"type": "BINARY", "data": "<base64>"}, "STRING" or "JSON".
type encoded struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// readBody reads at most limit bytes; more is 413. A declared length above
// the limit is refused before reading. The buffer grows with the bytes that
// arrive, never with the declared length: a client that declares 16 MiB
// and sends a few bytes holds a few bytes (at most firstBuffer up front).
func readBody(r io.Reader, declared int64, limit int) ([]byte, *Error) {
	if declared > int64(limit) {
		return nil, errorf(CodePayloadTooLarge, "request body exceeds %d bytes", limit)
	}
	buf := bytes.NewBuffer(make([]byte, 0, min(max(declared, 512), firstBuffer)+1))
	_, err := buf.ReadFrom(io.LimitReader(r, int64(limit)+1))
	b := buf.Bytes()
	if err != nil {
		return nil, errorf(CodeInvalidRequest, "reading body: %v", err)
	}
	if len(b) > limit {
		return nil, errorf(CodePayloadTooLarge, "request body exceeds %d bytes", limit)
	}
	return b, nil
}

// firstBuffer is the most readBody allocates before bytes arrive; 64 KiB
// holds a typical batch in one read, larger bodies grow by doubling.
const firstBuffer = 64 << 10

// strictJSON decodes exactly one JSON object into v, refusing unknown
// fields and trailing data.
func strictJSON(b []byte, v any) *Error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(CodeInvalidRequest, "malformed JSON: %v", jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errorf(CodeInvalidRequest, "malformed JSON: data after the object")
	}
	return nil
}

func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value)
	}
	return err.Error()
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

func decodeProduce(b []byte, name string, lim Limits) (ProduceRequest, *Error) {
	var body produceBody
	if err := strictJSON(b, &body); err != nil {
		return ProduceRequest{}, err
	}
	if body.OwnerID == nil {
		return ProduceRequest{}, errorf(CodeInvalidRequest, "owner_id is required")
	}
	if err := checkOwner(*body.OwnerID); err != nil {
		return ProduceRequest{}, err
	}
	token, err := requireToken(body.Token)
	if err != nil {
		return ProduceRequest{}, err
	}
	if body.BatchID == nil || *body.BatchID == "" || len(*body.BatchID) > 255 ||
		!utf8.ValidString(*body.BatchID) || strings.ContainsFunc(*body.BatchID, isControl) {
		return ProduceRequest{}, errorf(CodeInvalidRequest, "batch_id is required: 1..255 bytes of UTF-8 without control characters")
	}
	if len(body.Records) == 0 {
		return ProduceRequest{}, errorf(CodeInvalidRequest, "records must hold at least one record")
	}
	if len(body.Records) > lim.MaxRecords {
		return ProduceRequest{}, errorf(CodePayloadTooLarge, "%d records exceed the limit of %d per batch", len(body.Records), lim.MaxRecords)
	}
	recs := make([]Record, len(body.Records))
	for i := range body.Records {
		r, err := decodeRecord(body.Records[i], lim)
		if err != nil {
			err.Detail = fmt.Sprintf("records[%d]: %s", i, err.Detail)
			return ProduceRequest{}, err
		}
		recs[i] = r
	}
	return ProduceRequest{Name: name, Owner: *body.OwnerID, Token: token, BatchID: *body.BatchID, Records: recs}, nil
}

func decodeRecord(rb recordBody, lim Limits) (Record, *Error) {
	key, err := rb.Key.bytes("key")
	if err != nil {
		return Record{}, err
	}
	value, err := rb.Value.bytes("value")
	if err != nil {
		return Record{}, err
	}
	size := len(key) + len(value)
	for k, v := range rb.Headers {
		if k == "" || barrier.Reserved(k) {
			return Record{}, errorf(CodeInvalidRequest, "header %q: empty names and the %q prefix are reserved", k, barrier.ReservedPrefix)
		}
		size += len(k) + len(v)
	}
	if size > lim.MaxRecordBytes {
		return Record{}, errorf(CodePayloadTooLarge, "record of %d bytes exceeds the limit of %d", size, lim.MaxRecordBytes)
	}
	return Record{Key: key, Value: value, Headers: rb.Headers}, nil
}

// bytes decodes a key or value; nil (absent or JSON null) stays nil.
func (e *encoded) bytes(field string) ([]byte, *Error) {
	if e == nil {
		return nil, nil
	}
	if len(e.Data) == 0 {
		return nil, errorf(CodeInvalidRequest, "%s.data is required", field)
	}
	switch e.Type {
	case "BINARY":
		var s string
		if err := json.Unmarshal(e.Data, &s); err != nil {
			return nil, errorf(CodeInvalidRequest, "%s.data must be a base64 string", field)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, errorf(CodeInvalidRequest, "%s.data is not valid base64", field)
		}
		return b, nil
	case "STRING":
		var s string
		if err := json.Unmarshal(e.Data, &s); err != nil {
			return nil, errorf(CodeInvalidRequest, "%s.data must be a string", field)
		}
		return []byte(s), nil
	case "JSON":
		var buf bytes.Buffer
		if err := json.Compact(&buf, e.Data); err != nil {
			return nil, errorf(CodeInvalidRequest, "%s.data is not valid JSON", field)
		}
		return buf.Bytes(), nil
	}
	return nil, errorf(CodeInvalidRequest, "%s.type must be BINARY, STRING or JSON", field)
}
