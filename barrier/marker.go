package barrier

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// HeaderRollout marks a rollout marker: a control record, signed like a
// barrier, that tells the materializer the rollout state of a route
// pattern on the partition it is written to, from its offset on (FM21).
// The log carries the state, so a rebuild from offset 0 judges each record
// by the state in force where it was written.
const HeaderRollout = "fencegate-rollout"

// Marker is a rollout marker's content: the state of Pattern from this
// record on, on Topic/Partition. Version orders the changes of one
// pattern (the lease store's rollout version).
type Marker struct {
	Pattern   string    `json:"pattern"`
	State     string    `json:"state"`
	Version   int64     `json:"version"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	IssuedAt  time.Time `json:"issued_at"`
}

// markerEnvelope is a marker record's value.
type markerEnvelope struct {
	Marker    json.RawMessage `json:"marker"`
	Signature string          `json:"signature"`
}

// markerDomain separates a marker's signature from a barrier's: the same
// key signs both, and neither may pass as the other.
const markerDomain = "fencegate-rollout-marker\n"

// ErrBadMarker is a marker whose value is malformed or whose signature
// does not verify.
var ErrBadMarker = errors.New("bad rollout marker")

// SealMarker returns the record value of m.
func (s *Signer) SealMarker(m Marker) ([]byte, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return json.Marshal(markerEnvelope{Marker: body, Signature: sign(s.keys[0], append([]byte(markerDomain), body...))})
}

// OpenMarker verifies a marker record's value with any of the signer's
// keys and returns its content.
func (s *Signer) OpenMarker(value []byte) (Marker, error) {
	var env markerEnvelope
	if err := json.Unmarshal(value, &env); err != nil || len(env.Marker) == 0 {
		return Marker{}, fmt.Errorf("%w: malformed", ErrBadMarker)
	}
	signed := append([]byte(markerDomain), env.Marker...)
	if !s.verifies(signed, env.Signature) {
		return Marker{}, fmt.Errorf("%w: signature does not verify", ErrBadMarker)
	}
	var m Marker
	if err := json.Unmarshal(env.Marker, &m); err != nil {
		return Marker{}, fmt.Errorf("%w: malformed", ErrBadMarker)
	}
	return m, nil
}

// IsMarker reports whether a record's headers mark it as a rollout marker.
func IsMarker(hs []kafka.Header) bool {
	for _, h := range hs {
		if h.Key == HeaderRollout {
			return true
		}
	}
	return false
}

// Unstamped reports whether a record carries no fencegate header at all:
// what a writer outside the gateway writes (a direct client's old
// binary), as opposed to a record with a broken stamp.
func Unstamped(hs []kafka.Header) bool {
	for _, h := range hs {
		if Reserved(h.Key) {
			return false
		}
	}
	return true
}

// MarkerHeaders are the headers of a marker record.
func MarkerHeaders() []kafka.Header {
	return []kafka.Header{{Key: HeaderRollout, Value: []byte("1")}}
}
