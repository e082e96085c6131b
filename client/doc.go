// Package client is the Go SDK for fencegate workers: acquire a lease, keep
// it renewed, produce batches, release. It speaks only the HTTP API
// (docs/api.md in the fencegate repository) and imports only the standard
// library (Go 1.24 or later), so a worker does not pull the gateway's
// dependencies. The package Example is the loop every worker writes:
// AcquireWait, produce until Lost, back off, again; Client.Run writes it
// once, and the worker gives only its step (ExampleClient_Run).
//
// # Contexts and the life of a lease
//
// A context bounds one call, never a lease. Acquire's and AcquireWait's
// bound the acquiring; Produce's, Renew's and Release's bound that call
// and its retries. Once Acquire has returned, the lease is renewed in the
// background until one of three things ends it: Lease.Release,
// Client.Close (which releases every lease of the client), or its loss
// (Lost closes). Cancelling a context ends none of them.
//
// The calls retry what may succeed later until their context ends: with
// context.Background(), Acquire retries a gateway that does not answer for
// as long as it does not. Give contexts deadlines where a wait must end,
// and Config.Logger to see the retries (Warn). What could never succeed
// (a BaseURL without a scheme or host, a token with "Bearer ", a
// HolderHosts entry that is a URL, a TTL not longer than its renewal
// interval) New, or Acquire for its options, refuses at once.
//
// # Logging and hooks
//
// Config.Logger (a *slog.Logger; nil logs nothing) gets retried acquires,
// failed renewals and releases, and losses at Warn; grants, new
// generations and releases at Info; each renewal, Produce call and
// produce retry at Debug. Config.Hooks take values
// implementing any of AcquiredHook, RenewedHook, ProducedHook, LostHook
// and ReleasedHook, called at those points with the lease, the latency
// and the result: metrics and tracing without forking the client.
//
// Every error of this package says "fencegate: " once, at the start.
//
// # What a worker may rely on
//
// Safety never depends on this package: the gateway's epoch fence and the
// materializer's barrier hold whatever a worker does. What the SDK adds is
// that a worker following it never loses an acknowledged batch, never has
// a batch in the ledger twice, and stops writing when it may no longer own
// the lease:
//
//   - Fail closed. Each lease keeps a local deadline: the start of the last
//     successful renewal or grant request plus the TTL, which is never later
//     than the gateway's expiry. No produce attempt starts after it, and
//     once it passes the lease is lost (ErrDeadlinePassed, wrapping the last
//     renewal's error). Each renewal request ends after one renewal
//     interval, or at the deadline if that is sooner, and is then sent
//     again: a replica that stopped answering costs an interval, not the
//     lease.
//   - One reaction table. Acquire, renewal, Produce and Release read the
//     same table of answers (the answer table of docs/api.md):
//     lease_lost and fenced mean lost; generation_ended and not_holder mean
//     "ask for a new generation with the current token" (a renewal that
//     gets them renews that way and Lost stays open); misdirected (421)
//     means resend to holder_url; batch_aborted, too_many_requests (after
//     Retry-After), 5xx (forward_failed included: a replica forwarded the
//     request to the holder and got no answer) and transport errors mean
//     retry with backoff; the
//     other 4xx are returned to the caller. A lease_lost or fenced answer to
//     a token the SDK itself already replaced by a new generation is not a
//     loss: the request is sent again under the current token; such an
//     answer that arrives while a new generation is being asked for waits
//     for it before it is judged.
//   - Idle leases. A gateway parks a session that has had no batch for its
//     --park-after (its producer closes); the next batch is answered
//     not_holder and Produce resumes the lease as a new generation, so the
//     batch commits under a greater token (Result.Token, Lease.Grant)
//     without the caller seeing the refusal.
//   - Produce retries a batch under the same batch id until it is
//     committed, refused for good, the lease is lost, or the context ends.
//     The batch id is the idempotency key: the gateway answers a retry in
//     the same generation with the original offsets, and the ledger keeps a
//     batch retried under a new generation once. An error returned after an
//     attempt whose outcome stayed unknown matches ErrOutcomeUnknown.
//   - Several replicas. Config.BaseURL is a load balancer or a replica. A
//     lease follows a 421 to the replica holding its session and comes back
//     to BaseURL when that replica answers draining or does not answer, so
//     a drain (SIGTERM) or a restart of the holding replica moves the lease
//     with its current token, without a TTL wait and without closing Lost.
//   - No token sent astray. A 421 is followed only over BaseURL's scheme
//     (never from https to http) and to a host Config.HolderHosts allows
//     (by default BaseURL's host and the hosts of its parent domain, an IP
//     literal only itself). Any other holder_url is a failed call,
//     ErrHolderNotAllowed, retried at BaseURL: the bearer token goes
//     nowhere the worker did not point it.
//   - One new generation at a time per lease: renewal and Produce share it,
//     so they never race two requests with the same token.
//   - Lost is closed once the lease can no longer write; Err says why: a
//     *Problem (lease_lost with its Reason, fenced), ErrDeadlinePassed or
//     ErrReleased, each also matching ErrLeaseLost. Lost is a notification:
//     a worker that misses it is still refused by the SDK and the gateway.
//   - Acquire retries answers that granted nothing (draining, 429, 503,
//     500, transport errors) until its context ends; AcquireWait also waits
//     while another owner holds the lease (lease_held).
//   - Close releases every lease the client holds, all at once, and stops
//     their renewals even when its context ends first (a lease not
//     released expires after its TTL); a waiting AcquireWait returns
//     ErrClosed.
//
// What it does not promise: a new generation whose answer was lost (a
// transport error on the request) may leave the SDK's token superseded, and
// the next answer is then lease_lost: the lease is lost although the gateway
// still holds it for this owner until it expires. Fail closed is the choice
// here; re-acquire (AcquireWait) to go on.
//
// # Notices
//
// Each lease watches its events (GET /v1/leases/{name}/events) unless
// Config.DisableWatch is set, and is lost at once, with a NoticeError
// saying why, when an event shows a later generation or the end of its
// own: a worker stops writing sooner than at its next renewal. A notice
// is never a safety signal: it may be late or never come, the renewal
// loop is unchanged, and the gateway's fences hold without it.
// Client.Watch streams the events of every lease under a prefix, for
// tools and dashboards, resuming by event id after a broken stream.
//
// # Checkpoints
//
// A worker that consumes an input keeps its place in the lease's
// checkpoint: each batch carries the worker's state after it
// (WithCheckpoint: an input offset, a cursor, any bytes), committed in the
// batch's own transaction, so the checkpoint is in the ledger exactly when
// the batch is. Whoever holds the lease next, this worker after a loss or
// another one after a takeover, reads it with Lease.Checkpoint and goes on
// from its Value; the package's checkpoint Example is that loop: acquire,
// read the checkpoint, process from there, produce with the next
// checkpoint, on a loss start over.
//
// The read answers once the ledger has applied the barrier of the lease's
// current generation (it waits, and retries ledger_behind within its
// context), so it is final for every older generation: a batch of theirs
// is either behind the checkpoint or refused for good. That settles a
// batch whose outcome Produce could not tell (ErrOutcomeUnknown: its
// answer was lost, then the lease): the checkpoint after the next acquire
// names the last checkpointed batch (Checkpoint.Committed). When Produce
// itself met generation_ended it already asked for a new generation and
// retried the batch under it, with the same checkpoint; only a Produce
// that returned with the outcome unknown leaves anything to settle.
//
// A batch with a checkpoint travels in version 2 of the binary body,
// which gateways that predate checkpoints refuse (invalid_request) rather
// than drop the checkpoint; batches without one stay in version 1.
//
// # What it must never do
//
// The package must never import anything but the standard library and its
// own wire format (package wire), nor speak to Kafka or Postgres: HTTP
// only. It must never send the bearer token anywhere Config.HolderHosts
// does not allow or from https to http, start a produce attempt after a
// lease's local deadline, or retry a batch under another batch id; and no
// safety property may depend on it, since the gateway's fence and the
// ledger hold whatever a worker does.
//
// # Codes
//
// Switch on ErrorCode(err), never on Problem.Detail. The Code constants are
// the gateway's list; a test of the fencegate module fails when the SDK, the
// gateway and api/openapi.yaml disagree.
package client
