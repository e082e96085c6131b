// Package gateway is fencegate's exclusive produce gateway: the HTTP lease
// and produce API (echo/v4), one session per lease generation, and one
// confluent-kafka-go transactional producer per session.
//
// # Handover (POST /v1/leases)
//
//	worker          gateway replica                   Postgres            Kafka
//	  │ acquire ──▶  1 grant ─────────────────────────▶ token N, pending
//	  │              2 drop older local session (its producer closes)
//	  │              3 new producer(transactional.id) ─────────────────▶ InitTransactions:
//	  │                                                                   epoch+1, older
//	  │                                                                   producers fenced
//	  │              4 barrier{lease,N,owner,pid,epoch}+HMAC, commit ───▶ first record of N
//	  │              5 activate (N current, pending, unexpired) ▶ active
//	  │ ◀── 201 ──   6 only now
//
// Any failure of 2-5 or their deadline (a share of the TTL) closes the
// producer, abandons the grant and answers an error: the worker does not
// own the lease. A new generation for the current owner (ambiguous commit,
// replica move) is the same path with the current token: Postgres CAS on
// name + owner + token + unexpired gives N+1.
//
// # Produce (POST /v1/leases/{name}/records)
//
// session.admit (owner, token, not ended, local deadline) -> Begin ->
// produce every record stamped with the fencegate-* headers -> Commit.
// Produce of a session never calls Postgres (a request with no session on
// this replica reads the lease row and the replica registry, for routing
// only, to answer 421 with the holder's address). A fenced or fatal error
// ends the session for good (no re-creation, no other producer or
// transactional.id); an abortable error before the commit aborts the batch
// (503 batch_aborted, nothing written) unless the abort moved the
// producer's epoch; an error that would move the epoch, and any failure
// once CommitTransaction was called, ends the generation (409
// generation_ended): the worker asks for a new generation and retries the
// same batch_id. settle is the one rule of what a failed batch may be told
// (the answer table in docs/api.md): once the commit was requested, only
// 200 or generation_ended, whatever ended the session meanwhile. A batch id
// this generation already committed is answered with its original offsets.
//
// # Release
//
// Only the replica holding the session releases: it ends the session, lets
// the batch in flight finish or abort, closes the producer, then releases
// the row. The ended session stays in the map until its producer is
// closed, so a release sent again waits for the same batch (FM81).
// Another replica answers 421 while a live replica holds it.
//
// # Invariants (docs/design.md, "Invariants and where they are enforced")
//
//   - I1 token order: leasestore (sequence CACHE 1, nextval under the row
//     lock, rows never deleted); Gateway.install never replaces a later
//     token with an earlier one on this replica.
//   - I2 no stale write: the broker's producer-epoch fence, set up by
//     handover step 3 (Gateway.bump, then Gateway.writeBarrier) before
//     step 6; Gateway.fail never re-creates a producer for a fenced token,
//     and a generation whose epoch moved ends (Gateway.sameEpoch).
//     session.admit is an extra check, never the fence.
//   - I3 no acked loss: a 200 is sent only after CommitTransaction
//     returned success (Gateway.commit); offsets come from delivery reports
//     of that transaction.
//   - I4 no early ack: Gateway.Acquire returns a Grant only after
//     InitTransactions, the barrier commit and Activate (predicated on the
//     token still being current) all succeeded.
//   - I5 fail closed: every error path closes the producer or ends the
//     session and answers an error (toError maps each to one code);
//     the local deadline (request start + TTL, monotonic clock) is never
//     later than the database's expiry.
//
// # What it must never do
//
// The gateway must never answer 201 to an acquire before the epoch bump
// and the barrier committed and the grant was confirmed current (I4);
// never build a producer for a fenced token, fall back to a
// non-transactional one or use another transactional id (FM07); never tell
// a worker a definite refusal for a batch whose commit was requested
// (settle, FM25); never call Postgres on a live session's produce path
// (FM20); never send the replicas' credential outside the fleet (FM88).
// It shares no acceptance code with the ledger: it imports neither the
// materializer nor the load harness, so defence in depth shares no code
// path with what it defends against.
//
// Errors are RFC 9457 problem+json with a stable code; statusOf is the one
// code-to-status mapping and toError the one error-to-code mapping.
package gateway
