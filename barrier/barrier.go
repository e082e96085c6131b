// Package barrier defines the records fencegate writes to a lease's
// partition: the signed generation barrier that opens every generation, and
// the headers stamped on every data record. The gateway writes them and the
// materializer reads them; this package is the one definition both use.
//
// A barrier proves authenticity (the HMAC), not freshness: only comparing
// its token with the current fence, in offset order, fences
// (docs/design.md#why-it-exists).
//
// It must never import another fencegate package, nor judge a barrier
// against a fence: that is the materializer's, so the wire format sits
// below both ends and neither end's rules leak into it.
package barrier

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Header names stamped on every record the gateway writes.
const (
	HeaderLease   = "fencegate-lease"
	HeaderToken   = "fencegate-token"
	HeaderOwner   = "fencegate-owner"
	HeaderBatch   = "fencegate-batch"
	HeaderSeq     = "fencegate-seq"
	HeaderBarrier = "fencegate-barrier"
	// HeaderCheckpoint ("1") marks a batch's checkpoint record: the last
	// record of the batch's transaction, stamped like data, whose value
	// is the checkpoint (docs/design.md, "Checkpoints").
	HeaderCheckpoint = "fencegate-checkpoint"
	// HeaderCheckpointType ("STRING" or "JSON") comes on a checkpoint
	// record whose checkpoint was sent as that type, so that a read gives
	// it back as it was written; absent, it is BINARY.
	HeaderCheckpointType = "fencegate-checkpoint-type"
	// ReservedPrefix starts every header name workers may not set.
	ReservedPrefix = "fencegate-"
)

// MinKeyLen is the shortest HMAC key accepted.
const MinKeyLen = 16

// Grant is the generation a barrier opens.
//
// Topic, Partition and Partitions are the placement the generation was
// written under: the partition the gateway wrote the barrier to and the
// route's partition count then. A barrier written before they existed
// has none (Partitions 0; HasPlacement false) and still opens.
type Grant struct {
	Lease           string    `json:"lease"`
	Token           int64     `json:"token"`
	Owner           string    `json:"owner"`
	TransactionalID string    `json:"transactional_id"`
	ProducerID      int64     `json:"producer_id"`
	Epoch           int16     `json:"epoch"`
	IssuedAt        time.Time `json:"issued_at"`
	Topic           string    `json:"topic,omitempty"`
	Partition       int32     `json:"partition,omitempty"`
	Partitions      int32     `json:"partitions,omitempty"`
}

// HasPlacement reports whether the grant signs its placement (every
// barrier written since placements were signed does).
func (g Grant) HasPlacement() bool { return g.Partitions > 0 }

// envelope is the barrier record's value: the grant exactly as signed, and
// the signature over those bytes.
type envelope struct {
	Grant     json.RawMessage `json:"grant"`
	Signature string          `json:"signature"`
}

// Errors of Open.
var (
	ErrMalformed    = errors.New("malformed barrier")
	ErrBadSignature = errors.New("barrier signature does not verify")
)

// Signer signs barriers with one HMAC-SHA256 key and verifies them with
// that key or any previous one (key rotation: readers learn the new key
// before writers sign with it, and keep the old one until no barrier they
// may still read carries it).
type Signer struct{ keys [][]byte }

// NewSigner returns a Signer that signs with key and verifies with key or
// any of previous; every key must be at least MinKeyLen bytes.
func NewSigner(key []byte, previous ...[]byte) (*Signer, error) {
	s := &Signer{}
	for i, k := range append([][]byte{key}, previous...) {
		if len(k) < MinKeyLen {
			return nil, fmt.Errorf("barrier key %d must be at least %d bytes, got %d", i+1, MinKeyLen, len(k))
		}
		s.keys = append(s.keys, append([]byte(nil), k...))
	}
	return s, nil
}

// Seal returns the record value of a barrier for g.
func (s *Signer) Seal(g Grant) ([]byte, error) {
	body, err := json.Marshal(g)
	if err != nil {
		return nil, err
	}
	return json.Marshal(envelope{Grant: body, Signature: sign(s.keys[0], body)})
}

// Open verifies a barrier record value and returns its grant. It does not
// judge freshness or the lease binding: the caller compares Grant.Lease and
// Grant.Token with what it expects.
func (s *Signer) Open(value []byte) (Grant, error) {
	var env envelope
	if err := json.Unmarshal(value, &env); err != nil || len(env.Grant) == 0 {
		return Grant{}, ErrMalformed
	}
	if !s.verifies(env.Grant, env.Signature) {
		return Grant{}, ErrBadSignature
	}
	var g Grant
	if err := json.Unmarshal(env.Grant, &g); err != nil {
		return Grant{}, ErrMalformed
	}
	return g, nil
}

// verifies reports whether signature is body's under any of the keys.
// Every key is tried: no early exit that times which one signed.
func (s *Signer) verifies(body []byte, signature string) bool {
	ok := false
	for _, k := range s.keys {
		if hmac.Equal([]byte(sign(k, body)), []byte(signature)) {
			ok = true
		}
	}
	return ok
}

func sign(key, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}
