package barrier

import (
	"errors"
	"fmt"
	"strconv"

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
}

// ErrUnstamped: a record lacks the fencegate headers or they do not parse.
var ErrUnstamped = errors.New("record lacks valid fencegate headers")

// ReadStamp parses the fencegate-* headers of a record. Lease and token are
// required on every record; owner, batch and seq on every data record.
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
		}
	}
	switch {
	case !haveLease || s.Lease == "":
		return s, fmt.Errorf("%w: no %s", ErrUnstamped, HeaderLease)
	case !haveToken:
		return s, fmt.Errorf("%w: no positive %s", ErrUnstamped, HeaderToken)
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
