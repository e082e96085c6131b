package client

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The codes of the gateway's error replies (Problem.Code). Switch on them,
// never on Detail. The list is the gateway's (gateway/errors.go) and the
// OpenAPI document's (components.schemas.Code); a test of the gateway's
// module fails when the three differ.
const (
	CodeInvalidRequest   = "invalid_request"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeLeaseHeld        = "lease_held"
	CodeLeaseLost        = "lease_lost"
	CodeFenced           = "fenced"
	CodeNotHolder        = "not_holder"
	CodeMisdirected      = "misdirected"
	CodeGenerationEnded  = "generation_ended"
	CodeBatchAborted     = "batch_aborted"
	CodePayloadTooLarge  = "payload_too_large"
	CodeTooManyRequests  = "too_many_requests"
	CodeKafkaUnavailable = "kafka_unavailable"
	CodeStoreUnavailable = "store_unavailable"
	CodeDraining         = "draining"
	CodeInternal         = "internal"
	// CodeDirectClientGated: a client of kind direct (an old binary that
	// writes Kafka itself) asked for a lease of a pattern not in observe.
	CodeDirectClientGated = "direct_client_gated"
	// CodeRolloutStepRefused: the admin API refused a rollout step.
	CodeRolloutStepRefused = "rollout_step_refused"
	// CodeLedgerBehind: a checkpoint read waited and the ledger had not
	// applied the caller's barrier yet; nothing changed, retry.
	CodeLedgerBehind = "ledger_behind"
	// CodeForwardFailed: the replica asked forwarded the request to the
	// lease's holder, which did not answer; the outcome is unknown, retry.
	CodeForwardFailed = "forward_failed"
)

// Sentinel errors. A lost lease's error (Lease.Err, and what Produce
// returns once the lease is lost) matches ErrLeaseLost and its cause: a
// *Problem (lease_lost, fenced), ErrDeadlinePassed or ErrReleased.
var (
	// ErrLeaseLost: the lease can no longer write.
	ErrLeaseLost = errors.New("fencegate: lease lost")
	// ErrDeadlinePassed: no renewal succeeded before the lease's local
	// deadline; the lease may be someone else's by now.
	ErrDeadlinePassed = errors.New("fencegate: local deadline passed")
	// ErrReleased: the worker released the lease.
	ErrReleased = errors.New("fencegate: lease released")
	// ErrOutcomeUnknown is joined to a Produce error when an attempt of the
	// batch had an unknown outcome (generation_ended, a 5xx other than
	// batch_aborted, a transport error) and no later attempt settled it:
	// the batch may be committed. Retrying the same batch id, under this
	// lease or a later one of the same owner, never puts it in the ledger
	// twice.
	ErrOutcomeUnknown = errors.New("fencegate: outcome of an earlier attempt unknown")
)

// Problem is an error reply of the gateway: an RFC 9457 problem document
// with the gateway's extra members.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"` // for people; never parse it
	Code   string `json:"code"`

	// HolderOwnerID and ExpiresAt come with lease_held: the owner holding
	// the lease and until when (database time).
	HolderOwnerID string    `json:"holder_owner_id,omitempty"`
	ExpiresAt     time.Time `json:"expires_at,omitzero"`
	// Reason comes with a lease_lost decided by the lease store: not_found,
	// not_owner, token_mismatch, expired, released, not_active.
	Reason string `json:"reason,omitempty"`
	// Holder and HolderURL come with misdirected: the replica holding the
	// session and where to resend the request.
	Holder    string `json:"holder,omitempty"`
	HolderURL string `json:"holder_url,omitempty"`
	// Cause comes with some generation_ended answers, saying what ended
	// the generation: fenced (a fence seen after the batch's commit was
	// asked for) or fatal (a fatal producer error that is not a fence).
	// The outcome is still unknown; treat another value as a newer
	// gateway's.
	Cause string `json:"cause,omitempty"`
	// Pattern and RolloutState come with direct_client_gated and
	// rollout_step_refused: the route pattern and its rollout state;
	// BlockingLeases with rollout_step_refused: the direct clients' live
	// leases that enforced waits for.
	Pattern        string   `json:"pattern,omitempty"`
	RolloutState   string   `json:"rollout_state,omitempty"`
	BlockingLeases []string `json:"blocking_leases,omitempty"`
	// LedgerToken comes with ledger_behind: the token of the ledger's
	// fence for the lease, 0 if none.
	LedgerToken int64 `json:"ledger_token,omitempty"`

	// RetryAfter is the Retry-After header of the reply (too_many_requests,
	// ledger_behind; zero when absent).
	RetryAfter time.Duration `json:"-"`
}

// Error returns the status, the code and the detail, after the package's
// prefix.
func (p *Problem) Error() string {
	if p.Detail == "" {
		return fmt.Sprintf("fencegate: %d %s", p.Status, p.Code)
	}
	return fmt.Sprintf("fencegate: %d %s: %s", p.Status, p.Code, p.Detail)
}

// ErrorCode returns the code of the gateway's reply inside err ("" when
// err holds no Problem: nil, a transport error, a context error).
func ErrorCode(err error) string {
	var p *Problem
	if errors.As(err, &p) {
		return p.Code
	}
	return ""
}

// retryAfter parses a Retry-After header given in seconds.
func retryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// reaction is what the SDK does about an answer. Renewal, produce, acquire
// and release all read this one table, so they agree on what means lost
// and what means "ask for a new generation" (docs/api.md, the answer
// table).
type reaction int

const (
	// refuse: a definite refusal the worker must fix (the request, the
	// credentials, the size); retrying as is gets the same answer.
	refuse reaction = iota
	// lost: the generation is over and the lease may be someone else's.
	lost
	// regenerate: the session is gone (a drain, a restart) or the
	// generation ended on an unknown outcome, but the lease is still the
	// worker's: ask for a new generation with the current token.
	regenerate
	// follow: another live replica holds the session; resend to holder_url.
	follow
	// retry: nothing changed about ownership; send the same request again
	// after a backoff (batch_aborted, 429, 503, 500, transport errors).
	retry
	// held: another owner holds the lease; only a waiting acquire retries.
	held
)

// reactions maps every code to its reaction. A test of this package fails
// when a Code constant is missing here.
var reactions = map[string]reaction{
	CodeInvalidRequest:   refuse,
	CodeUnauthorized:     refuse,
	CodeForbidden:        refuse,
	CodeNotFound:         refuse,
	CodeMethodNotAllowed: refuse,
	CodePayloadTooLarge:  refuse,
	CodeLeaseHeld:        held,
	CodeLeaseLost:        lost,
	CodeFenced:           lost,
	CodeNotHolder:        regenerate,
	CodeGenerationEnded:  regenerate,
	CodeMisdirected:      follow,
	CodeBatchAborted:     retry,
	CodeTooManyRequests:  retry,
	CodeKafkaUnavailable: retry,
	CodeStoreUnavailable: retry,
	CodeDraining:         retry,
	CodeInternal:         retry,
	// Neither reaches a fenced worker: the first refuses direct clients,
	// the second answers the admin API.
	CodeDirectClientGated:  refuse,
	CodeRolloutStepRefused: refuse,
	CodeLedgerBehind:       retry,
	CodeForwardFailed:      retry,
}

// reactionTo classifies err, the error of one request. Transport errors
// and timeouts are retried; a context that ended is not (the caller
// checks its context before retrying).
func reactionTo(err error) reaction {
	var p *Problem
	if !errors.As(err, &p) {
		return retry // no answer: the caller's context and deadline decide
	}
	if r, ok := reactions[p.Code]; ok {
		if r == follow && p.HolderURL == "" {
			return retry
		}
		return r
	}
	// A reply without a known code (a proxy's 502, a newer gateway):
	// a 5xx says nothing about ownership, a 4xx is a refusal.
	if p.Status >= 500 {
		return retry
	}
	return refuse
}

// Outcome is what an answer to a produce says about its batch: the three
// kinds of docs/api.md, "The answer table". ProduceOutcome is that table;
// the SDK's produce and the load harness both read it, so they agree on
// which answers promise that nothing was committed.
type Outcome int

const (
	// OutcomeUnknown: the batch may or may not be committed. Retry the
	// same batch id (under a new generation after generation_ended).
	OutcomeUnknown Outcome = iota
	// OutcomeCommitted: 200, the batch is committed in Kafka.
	OutcomeCommitted
	// OutcomeRefused: a definite refusal; nothing of the batch is or will
	// be committed.
	OutcomeRefused
)

// String returns the outcome in words, as docs/api.md's answer table says
// it.
func (o Outcome) String() string {
	switch o {
	case OutcomeCommitted:
		return "committed"
	case OutcomeRefused:
		return "definite refusal"
	}
	return "outcome unknown"
}

// ProduceOutcome classifies an answer to a produce by its HTTP status and
// problem code (status 0: no answer at all, a transport error or a
// timeout). Definite are every 4xx except 409 generation_ended, and the
// 503s batch_aborted and draining (a stopping replica did nothing).
// Everything else, any other 5xx and a reply of a code this SDK does not
// know included, leaves the outcome unknown.
func ProduceOutcome(status int, code string) Outcome {
	switch {
	case status == http.StatusOK:
		return OutcomeCommitted
	case code == CodeGenerationEnded:
		return OutcomeUnknown
	case code == CodeBatchAborted, code == CodeDraining:
		return OutcomeRefused
	case status >= 400 && status < 500:
		return OutcomeRefused
	}
	return OutcomeUnknown
}

// definite reports whether err, the error of a produce attempt, promises
// that nothing of the batch is or will be committed (ProduceOutcome). A
// 421 whose holder_url was not followed (ErrHolderNotAllowed) is a 4xx too.
func definite(err error) bool {
	if errors.Is(err, ErrHolderNotAllowed) {
		return true // a 421: the gateway did nothing
	}
	var p *Problem
	if !errors.As(err, &p) {
		return false // a transport error or a timeout: no answer at all
	}
	return ProduceOutcome(p.Status, p.Code) == OutcomeRefused
}

// lostError is the error of a lost lease: it matches ErrLeaseLost and its
// cause.
type lostError struct{ cause error }

func (e *lostError) Error() string   { return ErrLeaseLost.Error() + ": " + bare(e.cause) }
func (e *lostError) Unwrap() []error { return []error{ErrLeaseLost, e.cause} }

// prefix starts the text of every error of this package, once: an error
// that wraps another of this package drops the inner one's prefix.
const prefix = "fencegate: "

// bare is err's text without the prefix.
func bare(err error) string { return strings.TrimPrefix(err.Error(), prefix) }

// unprefixed is an error printed without its prefix, for wrapping.
type unprefixed struct{ err error }

func (u unprefixed) Error() string { return bare(u.err) }
func (u unprefixed) Unwrap() error { return u.err }

// errorf is fmt.Errorf for the errors of this package: the text is the
// prefix and format, with the prefix of every error among args dropped;
// %w wraps as fmt.Errorf does.
func errorf(format string, args ...any) error {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = unprefixed{err}
		}
	}
	return fmt.Errorf(prefix+format, args...)
}
