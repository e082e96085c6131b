// Package wire is the compact binary body of a produce request: the same
// batch as the JSON body (owner_id, token, batch_id, records with key,
// value and headers), without JSON's escaping and base64. The SDK sends
// it; the gateway decodes it; JSON stays for curl and other clients.
//
// The body, with every integer an unsigned LEB128 varint (encoding/binary's
// Uvarint) and every string or byte string its length followed by its
// bytes:
//
//	"FGB" 0x01 or 0x02      magic and version
//	owner_id                string
//	token                   varint
//	batch_id                string
//	record count            varint
//	per record:
//	  key                   nullable bytes: 0 is null, n+1 precedes n bytes
//	  value                 nullable bytes, likewise
//	  header count          varint
//	  per header: name (string), value (bytes)
//	checkpoint              version 2 only: nullable bytes, 0 is none
//
// Version 2 is version 1 followed by the batch's checkpoint; Append writes
// version 1 when the batch has none, so a gateway that knows only version
// 1 still takes every batch without a checkpoint. Decode takes both.
// Nothing may follow the last record (version 1) or the checkpoint
// (version 2), and every varint is the shortest of its value, so a batch
// has one encoding. Decode checks every length against
// the bytes left before it slices or allocates, so a body cannot make the
// decoder allocate more than a small multiple of its own size.
//
// Decode must never slice or allocate past the bytes it was given nor
// accept two encodings of one batch, and the package must never import
// anything outside the standard library: the SDK and the gateway both
// link it.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ContentType is the media type of the binary body.
const ContentType = "application/vnd.fencegate.batch.v1"

const (
	magic   = "FGB\x01"
	magicV2 = "FGB\x02"
)

// Header is one record header.
type Header struct {
	Name  string
	Value []byte
}

// Record is one record; a nil Key or Value is a null one.
type Record struct {
	Key, Value []byte
	Headers    []Header
}

// Batch is a produce request's body.
type Batch struct {
	OwnerID string
	Token   int64
	BatchID string
	Records []Record
	// Checkpoint is the batch's checkpoint; nil is none (version 1).
	Checkpoint []byte
}

// Append appends b's encoding to dst.
func Append(dst []byte, b Batch) []byte {
	if b.Checkpoint != nil {
		dst = append(dst, magicV2...)
	} else {
		dst = append(dst, magic...)
	}
	dst = appendBytes(dst, []byte(b.OwnerID))
	dst = binary.AppendUvarint(dst, uint64(b.Token))
	dst = appendBytes(dst, []byte(b.BatchID))
	dst = binary.AppendUvarint(dst, uint64(len(b.Records)))
	for _, r := range b.Records {
		dst = appendNullable(dst, r.Key)
		dst = appendNullable(dst, r.Value)
		dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
		for _, h := range r.Headers {
			dst = appendBytes(dst, []byte(h.Name))
			dst = appendBytes(dst, h.Value)
		}
	}
	if b.Checkpoint != nil {
		dst = appendNullable(dst, b.Checkpoint)
	}
	return dst
}

// Size is the length of b's encoding, for sizing a buffer.
func Size(b Batch) int {
	n := len(magic) + 4*binary.MaxVarintLen64 + len(b.OwnerID) + len(b.BatchID) + len(b.Checkpoint)
	for _, r := range b.Records {
		n += 3*binary.MaxVarintLen64 + len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += 2*binary.MaxVarintLen64 + len(h.Name) + len(h.Value)
		}
	}
	return n
}

func appendBytes(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

func appendNullable(dst, b []byte) []byte {
	if b == nil {
		return append(dst, 0)
	}
	return append(binary.AppendUvarint(dst, uint64(len(b))+1), b...)
}

// ErrTooLarge is returned (wrapped) when a body exceeds one of Decode's
// Limits; the caller answers it as a payload too large.
var ErrTooLarge = errors.New("over a limit")

// Limits bound what Decode accepts. They are checked while decoding,
// before the work they bound: a header count above Headers is refused
// before any header is read.
type Limits struct {
	Records     int // records per batch
	Headers     int // headers per record
	HeaderBytes int // names and values of one record's headers
	Checkpoint  int // bytes of the checkpoint
}

// Decode decodes body, refusing one over lim (ErrTooLarge). Keys, values
// and header values alias body; names and ids are copied.
func Decode(body []byte, lim Limits) (Batch, error) {
	d := decoder{buf: body, lim: lim}
	v2 := len(body) >= len(magicV2) && string(body[:len(magicV2)]) == magicV2
	if !v2 && (len(body) < len(magic) || string(body[:len(magic)]) != magic) {
		return Batch{}, errors.New("not a fencegate batch: the body must start with FGB and version 1 or 2")
	}
	d.buf = body[len(magic):]
	b := Batch{OwnerID: d.text("owner_id"), Token: d.token(), BatchID: d.text("batch_id")}
	n := d.count("record count", 3) // a record takes at least three bytes: null key, null value, no headers
	if d.err == nil && n > lim.Records {
		return Batch{}, fmt.Errorf("%d records: %w (the limit is %d per batch)", n, ErrTooLarge, lim.Records)
	}
	b.Records = d.records(n)
	if v2 {
		b.Checkpoint = d.checkpoint()
	}
	if d.err == nil && len(d.buf) > 0 {
		d.err = fmt.Errorf("%d bytes after the last record or checkpoint", len(d.buf))
	}
	if d.err != nil {
		return Batch{}, d.err
	}
	return b, nil
}

// decoder reads buf front to back; the first error sticks and every read
// after it returns zero values.
type decoder struct {
	buf   []byte
	err   error
	lim   Limits
	names []string // header names seen, so a batch's repeated names share one string
}

func (d *decoder) records(n int) []Record {
	if d.err != nil {
		return nil
	}
	recs := make([]Record, n)
	var arena []Header // the batch's headers, one growing allocation
	for i := range recs {
		r := &recs[i]
		r.Key = d.nullable("key")
		r.Value = d.nullable("value")
		h := d.count("header count", 2)
		if d.err == nil && h > d.lim.Headers {
			d.err = fmt.Errorf("%d headers: %w (the limit is %d per record)", h, ErrTooLarge, d.lim.Headers)
		}
		start, size := len(arena), 0
		for j := 0; j < h && d.err == nil; j++ {
			name := d.name()
			arena = append(arena, Header{Name: name, Value: d.bytes("header value")})
			if size += len(name) + len(arena[len(arena)-1].Value); size > d.lim.HeaderBytes && d.err == nil {
				d.err = fmt.Errorf("headers of more than %d bytes: %w", d.lim.HeaderBytes, ErrTooLarge)
			}
		}
		if h > 0 {
			r.Headers = arena[start:len(arena):len(arena)]
		}
		if d.err != nil {
			d.err = fmt.Errorf("records[%d]: %w", i, d.err)
			return nil
		}
	}
	return recs
}

// checkpoint reads version 2's checkpoint: 0 is none (Append writes a
// batch without one as version 1, but a version 2 body may say none).
func (d *decoder) checkpoint() []byte {
	n := d.uvarint("checkpoint")
	switch {
	case d.err != nil || n == 0:
		return nil
	case n-1 > uint64(d.lim.Checkpoint):
		d.err = fmt.Errorf("checkpoint of %d bytes: %w (the limit is %d)", n-1, ErrTooLarge, d.lim.Checkpoint)
		return nil
	}
	b := d.take("checkpoint", n-1)
	if b == nil && d.err == nil {
		return []byte{}
	}
	return b
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	switch {
	case n <= 0:
		d.err = fmt.Errorf("%s: truncated or overlong varint", what)
		return 0
	case n > 1 && d.buf[n-1] == 0:
		// A last byte of 0 adds nothing: Uvarint takes 0x80 0x00 for 0,
		// and the body would not be the one encoding of its batch.
		d.err = fmt.Errorf("%s: not the shortest varint of %d", what, v)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// count reads a count of items that take at least min bytes each.
func (d *decoder) count(what string, min int) int {
	v := d.uvarint(what)
	if d.err == nil && v > uint64(len(d.buf)/min) {
		d.err = fmt.Errorf("%s %d exceeds what the %d bytes left can hold", what, v, len(d.buf))
		return 0
	}
	return int(v)
}

func (d *decoder) token() int64 {
	v := d.uvarint("token")
	if d.err == nil && (v == 0 || v > 1<<63-1) {
		d.err = errors.New("token must be a positive integer")
	}
	return int64(v)
}

func (d *decoder) take(what string, n uint64) []byte {
	if d.err == nil && n > uint64(len(d.buf)) {
		d.err = fmt.Errorf("%s: %d bytes declared, %d left", what, n, len(d.buf))
	}
	if d.err != nil {
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what)
	b := d.take(what, n)
	if b == nil && d.err == nil {
		return []byte{}
	}
	return b
}

func (d *decoder) nullable(what string) []byte {
	n := d.uvarint(what)
	if n == 0 || d.err != nil {
		return nil
	}
	b := d.take(what, n-1)
	if b == nil && d.err == nil {
		return []byte{}
	}
	return b
}

// name reads a header name, reusing the string of an equal earlier name
// (records of a batch mostly carry the same few names).
func (d *decoder) name() string {
	b := d.bytes("header name")
	for _, n := range d.names {
		if n == string(b) {
			return n
		}
	}
	s := d.check("header name", b)
	if len(d.names) < 16 && d.err == nil {
		d.names = append(d.names, s)
	}
	return s
}

func (d *decoder) text(what string) string { return d.check(what, d.bytes(what)) }

func (d *decoder) check(what string, b []byte) string {
	if d.err == nil && !utf8.Valid(b) {
		d.err = fmt.Errorf("%s is not valid UTF-8", what)
	}
	return string(b)
}
