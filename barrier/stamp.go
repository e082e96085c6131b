package barrier

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Stamp is what the fencegate-* headers of a record say.
type Stamp struct {
	Lease   string
	Token   int64
	Owner   string
	Batch   string
	Seq     int
	Barrier bool
	// Checkpoint marks a batch's checkpoint record (stamped like data,
	// Seq one past the batch's last data record).
	Checkpoint bool
	// CheckpointType is the type a checkpoint was written as: "STRING" or
	// "JSON", "" for BINARY (HeaderCheckpointType).
	CheckpointType string
}

// Headers encodes s as the fencegate headers of a record: lease, token
// and owner on every record, batch and seq on data and checkpoints, the
// barrier flag on a barrier, the checkpoint flag on a checkpoint. ReadStamp decodes them; the two are the one wire format of the
// headers (FuzzStampRoundTrip).
func (s Stamp) Headers() []kafka.Header {
	return s.AppendHeaders(make([]kafka.Header, 0, DataHeaders))
}

// DataHeaders is the number of headers Append adds to a data record.
const DataHeaders = 5

// AppendHeaders appends s's headers to dst (a record's own headers).
func (s Stamp) AppendHeaders(dst []kafka.Header) []kafka.Header {
	if s.Checkpoint {
		return s.Stamper().AppendCheckpoint(dst, s.Seq)
	}
	return s.Stamper().Append(dst, s.Seq)
}

// Stamper encodes the headers of one batch's records: the values every
// record shares (lease, token, owner, batch) once, the seq per record.
// Records may share the returned header values: producers copy them.
type Stamper struct {
	s                          Stamp
	lease, token, owner, batch []byte
	digits                     []byte // the seqs so far, end to end
}

// Stamper returns the encoder of s's headers (s.Seq is ignored: Append
// takes each record's).
func (s Stamp) Stamper() *Stamper {
	return &Stamper{s: s, lease: []byte(s.Lease), token: strconv.AppendInt(nil, s.Token, 10),
		owner: []byte(s.Owner), batch: []byte(s.Batch)}
}

// Append appends the headers of the record with sequence number seq.
func (p *Stamper) Append(dst []kafka.Header, seq int) []kafka.Header {
	dst = append(dst, kafka.Header{Key: HeaderLease, Value: p.lease},
		kafka.Header{Key: HeaderToken, Value: p.token},
		kafka.Header{Key: HeaderOwner, Value: p.owner})
	if p.s.Barrier {
		return append(dst, kafka.Header{Key: HeaderBarrier, Value: []byte("1")})
	}
	start := len(p.digits)
	p.digits = strconv.AppendInt(p.digits, int64(seq), 10)
	return append(dst, kafka.Header{Key: HeaderBatch, Value: p.batch},
		kafka.Header{Key: HeaderSeq, Value: p.digits[start:len(p.digits):len(p.digits)]})
}

// AppendCheckpoint appends the headers of the batch's checkpoint record,
// whose seq is one past the batch's last data record: a data record's
// headers and the checkpoint flag.
func (p *Stamper) AppendCheckpoint(dst []kafka.Header, seq int) []kafka.Header {
	dst = append(p.Append(dst, seq), kafka.Header{Key: HeaderCheckpoint, Value: []byte("1")})
	if p.s.CheckpointType != "" {
		dst = append(dst, kafka.Header{Key: HeaderCheckpointType, Value: []byte(p.s.CheckpointType)})
	}
	return dst
}

// Reserved reports whether a header name belongs to fencegate: the
// reserved prefix, in any case. Workers may not set such headers, and the
// ledger keeps only the others.
func Reserved(name string) bool {
	return len(name) >= len(ReservedPrefix) && strings.EqualFold(name[:len(ReservedPrefix)], ReservedPrefix)
}

// ErrUnstamped: a record lacks the fencegate headers or they do not parse.
var ErrUnstamped = errors.New("record lacks valid fencegate headers")

// ReadStamp parses the fencegate-* headers of a record. Lease and token are
// required on every record; owner, batch and seq on every data and
// checkpoint record. A record flagged both barrier and checkpoint is
// refused.
func ReadStamp(hs []kafka.Header) (Stamp, error) {
	s := Stamp{Seq: -1}
	var haveLease, haveToken, haveSeq bool
	for _, h := range hs {
		v := string(h.Value)
		var err error
		switch h.Key {
		case HeaderLease:
			s.Lease, haveLease = v, true
		case HeaderToken:
			s.Token, err = strconv.ParseInt(v, 10, 64)
			haveToken = err == nil && s.Token > 0
		case HeaderOwner:
			s.Owner = v
		case HeaderBatch:
			s.Batch = v
		case HeaderSeq:
			s.Seq, err = strconv.Atoi(v)
			haveSeq = err == nil && s.Seq >= 0
		case HeaderBarrier:
			s.Barrier = v == "1"
		case HeaderCheckpoint:
			s.Checkpoint = v == "1"
		case HeaderCheckpointType:
			s.CheckpointType = v
		}
	}
	switch {
	case !haveLease || s.Lease == "":
		return s, fmt.Errorf("%w: no %s", ErrUnstamped, HeaderLease)
	case !haveToken:
		return s, fmt.Errorf("%w: no positive %s", ErrUnstamped, HeaderToken)
	case s.Barrier && s.Checkpoint:
		return s, fmt.Errorf("%w: both %s and %s", ErrUnstamped, HeaderBarrier, HeaderCheckpoint)
	case s.CheckpointType != "" && (!s.Checkpoint || s.CheckpointType != "STRING" && s.CheckpointType != "JSON"):
		return s, fmt.Errorf("%w: %s %q on a record that is not a checkpoint, or not STRING or JSON", ErrUnstamped, HeaderCheckpointType, s.CheckpointType)
	case !s.Barrier && (s.Batch == "" || !haveSeq || s.Owner == ""):
		// Owner, batch and seq make the ledger's dedup key.
		return s, fmt.Errorf("%w: data record without %s/%s/%s", ErrUnstamped, HeaderOwner, HeaderBatch, HeaderSeq)
	}
	return s, nil
}

// Standing is how a record's token stands against a lease's fence.
type Standing int

const (
	// Current: token == fence, the generation in force.
	Current Standing = iota
	// Stale: token < fence, an older generation (the incident).
	Stale
	// Unfenced: token > fence without a barrier that opened it; a bare
	// number must never advance a fence (FM11).
	Unfenced
)

// Judge is the one token-versus-fence rule of fencegate: fencing rejects
// lower generations and, for data, unopened higher ones; equal tokens are
// the generation in force (duplicates within it are a batch-id matter).
// fence is 0 when no barrier was seen.
func Judge(fence, token int64) Standing {
	switch {
	case token == fence:
		return Current
	case token < fence:
		return Stale
	}
	return Unfenced
}
