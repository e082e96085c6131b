package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// Code is the stable, machine-readable code of an error reply. Clients in
// other languages switch on it; never rename one.
type Code string

// The codes, one for each kind of refusal (docs/api.md, "Codes").
const (
	CodeInvalidRequest   Code = "invalid_request"
	CodeUnauthorized     Code = "unauthorized"
	CodeForbidden        Code = "forbidden"
	CodeNotFound         Code = "not_found"
	CodeMethodNotAllowed Code = "method_not_allowed"
	CodeLeaseHeld        Code = "lease_held"
	CodeLeaseLost        Code = "lease_lost"
	CodeFenced           Code = "fenced"
	CodeNotHolder        Code = "not_holder"
	CodeMisdirected      Code = "misdirected"
	CodeGenerationEnded  Code = "generation_ended"
	CodeBatchAborted     Code = "batch_aborted"
	CodePayloadTooLarge  Code = "payload_too_large"
	CodeTooManyRequests  Code = "too_many_requests"
	CodeKafkaUnavailable Code = "kafka_unavailable"
	CodeStoreUnavailable Code = "store_unavailable"
	CodeDraining         Code = "draining"
	CodeInternal         Code = "internal"
	// CodeDirectClientGated: a client whose config says it writes Kafka
	// directly asked for a lease of a pattern not in observe (FM21).
	CodeDirectClientGated Code = "direct_client_gated"
	// CodeRolloutStepRefused: an admin asked for a rollout step its
	// precondition refuses (docs/api.md, "Admin").
	CodeRolloutStepRefused Code = "rollout_step_refused"
	// CodeLedgerBehind: a checkpoint read waited its bound and the ledger
	// had not applied the caller's barrier; nothing changed.
	CodeLedgerBehind Code = "ledger_behind"
	// CodeForwardFailed: a replica forwarded the request to the lease's
	// holder, which did not answer; the outcome is unknown (FM50).
	CodeForwardFailed Code = "forward_failed"
)

// statusOf is the one place codes map to HTTP statuses.
func statusOf(c Code) int {
	switch c {
	case CodeInvalidRequest:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden, CodeDirectClientGated:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeLeaseHeld, CodeLeaseLost, CodeFenced, CodeNotHolder, CodeGenerationEnded, CodeRolloutStepRefused:
		return http.StatusConflict
	case CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeTooManyRequests:
		return http.StatusTooManyRequests
	case CodeMisdirected:
		return http.StatusMisdirectedRequest
	case CodeKafkaUnavailable, CodeStoreUnavailable, CodeBatchAborted, CodeDraining, CodeLedgerBehind:
		return http.StatusServiceUnavailable
	case CodeForwardFailed:
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

// Sentinel errors of the gateway's Kafka side.
var (
	// ErrKafkaUnavailable: the cluster could not be reached or refused a
	// call in a way that says nothing about ownership.
	ErrKafkaUnavailable = errors.New("kafka unavailable")
)

// Error is an error with a stable code for the HTTP reply.
type Error struct {
	Code   Code
	Detail string
	// Members are the problem document's members beyond RFC 9457's.
	Members
	// outcome refines a refused batch for metrics (expired vs stale).
	outcome string
}

// Members are the members of a problem document that some codes add to
// RFC 9457's; each is left out when empty, and comes only with the codes
// its comment names (docs/api.md lists them, api/openapi.yaml's Problem
// schema too).
type Members struct {
	// HolderOwnerID and ExpiresAt come with lease_held: the owner holding
	// the lease and until when (database time).
	HolderOwnerID string    `json:"holder_owner_id,omitempty"`
	ExpiresAt     time.Time `json:"expires_at,omitzero"`
	// Reason comes with a lease_lost decided by the lease store, or by
	// the local deadline (expired).
	Reason leasestore.LostReason `json:"reason,omitempty"`
	// Holder and HolderURL come with misdirected: the live replica that
	// holds the session and where to resend the request.
	Holder    string `json:"holder,omitempty"`
	HolderURL string `json:"holder_url,omitempty"`
	// Cause comes with some generation_ended answers: the code the
	// failure would have had had the batch's fate been known, or
	// causeFatal.
	Cause string `json:"cause,omitempty"`
	// Pattern and RolloutState come with direct_client_gated and
	// rollout_step_refused: the route pattern and the rollout state that
	// refused (FM21); BlockingLeases with rollout_step_refused: the live
	// leases of direct clients that enforce waits for.
	Pattern        string                  `json:"pattern,omitempty"`
	RolloutState   leasestore.RolloutState `json:"rollout_state,omitempty"`
	BlockingLeases []string                `json:"blocking_leases,omitempty"`
	// LedgerToken comes with ledger_behind: the token of the ledger's
	// fence for the lease on its partition, 0 if none.
	LedgerToken *int64 `json:"ledger_token,omitempty"`
}

// Error returns the code and the detail.
func (e *Error) Error() string { return string(e.Code) + ": " + e.Detail }

func errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Detail: fmt.Sprintf(format, args...)}
}

// problem is an RFC 9457 problem document.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   Code   `json:"code"`
	Members
}

// problemOf is the problem document of e.
func problemOf(e *Error) problem {
	status := statusOf(e.Code)
	return problem{Type: "https://fencegate.dev/problems/" + string(e.Code), Title: http.StatusText(status),
		Status: status, Detail: e.Detail, Code: e.Code, Members: e.Members}
}

// toError translates any error reaching the HTTP edge into an *Error. It is
// the one place where package errors meet codes.
func toError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var held *leasestore.HeldError
	var lost *leasestore.LostError
	var gated *leasestore.GatedError
	switch {
	case errors.As(err, &gated):
		return &Error{Code: CodeDirectClientGated, Detail: err.Error(),
			Members: Members{Pattern: gated.Pattern, RolloutState: gated.State}}
	case errors.As(err, &held):
		return &Error{Code: CodeLeaseHeld, Detail: err.Error(), Members: Members{
			HolderOwnerID: held.Owner, ExpiresAt: held.ExpiresAt}}
	case errors.As(err, &lost):
		return &Error{Code: CodeLeaseLost, Detail: err.Error(), Members: Members{Reason: lost.Reason}}
	case errors.Is(err, leasestore.ErrInvalid), errors.Is(err, txnmap.ErrInvalidName),
		errors.Is(err, txnmap.ErrNoRoute):
		return &Error{Code: CodeInvalidRequest, Detail: err.Error()}
	case errors.Is(err, leasestore.ErrNotFound):
		return &Error{Code: CodeNotFound, Detail: err.Error()}
	case errors.Is(err, leasestore.ErrUnavailable):
		return &Error{Code: CodeStoreUnavailable, Detail: "lease store unavailable"}
	case errors.Is(err, ErrKafkaUnavailable):
		return &Error{Code: CodeKafkaUnavailable, Detail: err.Error()}
	}
	return &Error{Code: CodeInternal, Detail: "internal error"}
}
