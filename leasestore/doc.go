// Package leasestore is fencegate's Postgres lease store (pgx/v5): named
// leases with fencing tokens, all on database time.
//
// It must never know HTTP, Kafka or the ledger, nor decide a lease by the
// process's clock: every expiry is compared with clock_timestamp() in the
// statement that acts on it, and no statement deletes a lease row.
//
// # States
//
//	         Acquire (insert, or take over an ended row)
//	(none) ─────────────────────────────────────────────▶ pending
//	                                                        │  Activate (token current,
//	Regenerate (owner + token + unexpired) ──▶ pending      │  pending, unexpired)
//	      ▲                                                 ▼
//	      └──────────────────────────────────────────────  active ──Renew──▶ active
//	                                                        │
//	                        Release (owner + token + unexpired)
//	                                                        ▼
//	pending ──Abandon (failed handover)──▶ released ◀───────┘
//
// Expiry is not a state change: a row whose expires_at <= clock_timestamp()
// has ended, whatever its state, and Acquire may take it over. Rows are
// never deleted, so every row keeps the per-name high-water token.
//
// pending means "granted in Postgres, Kafka producer epoch not yet bumped";
// the gateway moves it to active only after InitTransactions and the
// generation barrier succeeded (see package gateway).
//
// # Invariants and the statements that enforce them
//
//   - I1 token order (per name, granted tokens strictly increase):
//     lease_token_seq is CACHE 1 NO CYCLE (migration 0001, checked by
//     Store.Verify, which refuses to run otherwise); qAcquire and
//     qRegenerate take nextval() inside DO UPDATE SET / UPDATE SET, that is
//     under the row lock, never a value allocated before it; rows are never
//     deleted.
//   - Exclusivity (at most one unexpired grant per name at any database
//     instant): qAcquire's ON CONFLICT ... WHERE l.expires_at <=
//     clock_timestamp().
//   - FM03 (an expired lease never renews): qRenew and qRelease predicate on
//     name, owner, token, state active and expires_at > clock_timestamp() in
//     one statement. Renewals that arrive together share one qRenewBatch
//     (renewQueue), which holds the same predicate for each row on its own:
//     one caller's expired lease is refused while the others renew.
//   - I4 / FM06 (no acknowledgement of a superseded grant): qActivate
//     predicates on token, state pending and expires_at > clock_timestamp().
//   - Audit: every write statement inserts its lease_events row in a
//     data-modifying CTE of the same statement, so history and state commit
//     together.
//
// All time is database time: no application or client clock decides
// expiry. The application clock is used only by the gateway for its local
// deadline, which is never later than the database's expiry.
//
// # Failures
//
// Refused predicates return *HeldError (ErrLeaseHeld) or *LostError
// (ErrLeaseLost) with the reason read after the fact; argument errors
// *InvalidError (ErrInvalid); database errors wrap ErrUnavailable. A caller
// that gets ErrUnavailable must assume nothing was granted or renewed: fail
// closed.
package leasestore
