package leasestore

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors at the package edge. Typed errors below wrap them with
// details; test with errors.Is and read details with errors.As.
var (
	// ErrLeaseHeld: another owner holds an unexpired lease.
	ErrLeaseHeld = errors.New("lease held")
	// ErrLeaseLost: the caller is not the current owner of the given token, or
	// the lease expired or was released.
	ErrLeaseLost = errors.New("lease lost")
	// ErrInvalid: an argument is out of bounds (TTL, name, token).
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound: no lease of that name was ever granted.
	ErrNotFound = errors.New("lease not found")
	// ErrUnavailable: the database could not be reached or failed the call.
	ErrUnavailable = errors.New("lease store unavailable")
	// ErrUnsafeSequence: the token sequence may hand out tokens out of order.
	ErrUnsafeSequence = errors.New("unsafe token sequence")
)

// HeldError says who holds the lease and until when (database time).
type HeldError struct {
	Name      string
	Owner     string
	Token     int64
	ExpiresAt time.Time
}

// Error names the lease, its holder and until when.
func (e *HeldError) Error() string {
	return fmt.Sprintf("lease %q held by %q (token %d) until %s",
		e.Name, e.Owner, e.Token, e.ExpiresAt.Format(time.RFC3339Nano))
}

// Unwrap makes errors.Is(err, ErrLeaseHeld) hold.
func (e *HeldError) Unwrap() error { return ErrLeaseHeld }

// LostReason says why a caller is no longer the owner.
type LostReason string

// The reasons, as the lease row shows them after the refusal.
const (
	LostNotFound      LostReason = "not_found"
	LostNotOwner      LostReason = "not_owner"
	LostTokenMismatch LostReason = "token_mismatch"
	LostExpired       LostReason = "expired"
	LostReleased      LostReason = "released"
	LostNotActive     LostReason = "not_active"
)

// LostError says why an operation on a lease was refused.
type LostError struct {
	Name   string
	Reason LostReason
	// Current is the lease's current token (0 when unknown).
	Current int64
}

// Error names the lease and the reason.
func (e *LostError) Error() string {
	return fmt.Sprintf("lease %q lost: %s", e.Name, e.Reason)
}

// Unwrap makes errors.Is(err, ErrLeaseLost) hold.
func (e *LostError) Unwrap() error { return ErrLeaseLost }

// InvalidError names the argument that was refused.
type InvalidError struct {
	Field   string
	Message string
}

// Error names the field and what is wrong with it.
func (e *InvalidError) Error() string { return e.Field + ": " + e.Message }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// unavailable wraps a database error so callers see ErrUnavailable and the
// cause.
func unavailable(op string, err error) error {
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
}

// ErrGated: the rollout state of the lease's route pattern refuses the
// client, which writes Kafka directly (FM21).
var ErrGated = errors.New("rollout gate refused a direct client")

// GatedError names the pattern whose rollout state refused a direct
// client, and that state.
type GatedError struct {
	Pattern string
	State   RolloutState
}

// Error says which pattern refused and why.
func (e *GatedError) Error() string {
	return fmt.Sprintf("pattern %q is %s: clients that write Kafka directly may not take or renew its leases", e.Pattern, e.State)
}

// Unwrap makes errors.Is(err, ErrGated) hold.
func (e *GatedError) Unwrap() error { return ErrGated }
