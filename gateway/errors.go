package gateway

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// Code is the stable, machine-readable code of an error reply. Clients in
// other languages switch on it; never rename one.
type Code string

const (
	CodeInvalidRequest   Code = "invalid_request"
	CodeUnauthorized     Code = "unauthorized"
	CodeForbidden        Code = "forbidden"
	CodeNotFound         Code = "not_found"
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
	case CodeLeaseHeld, CodeLeaseLost, CodeFenced, CodeNotHolder, CodeGenerationEnded, CodeRolloutStepRefused:
		return http.StatusConflict
	case CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeTooManyRequests:
		return http.StatusTooManyRequests
	case CodeMisdirected:
		return http.StatusMisdirectedRequest
	case CodeKafkaUnavailable, CodeStoreUnavailable, CodeBatchAborted, CodeDraining:
		return http.StatusServiceUnavailable
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
	// Extra members of the problem document (e.g. the holder of a lease).
	Extra map[string]any
	// outcome refines a refused batch for metrics (expired vs stale).
	outcome string
}

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
		return &Error{Code: CodeDirectClientGated, Detail: err.Error(), Extra: map[string]any{
			"pattern": gated.Pattern, "rollout_state": gated.State}}
	case errors.As(err, &held):
		return &Error{Code: CodeLeaseHeld, Detail: err.Error(), Extra: map[string]any{
			"holder_owner_id": held.Owner, "expires_at": held.ExpiresAt}}
	case errors.As(err, &lost):
		return &Error{Code: CodeLeaseLost, Detail: err.Error(), Extra: map[string]any{"reason": lost.Reason}}
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
