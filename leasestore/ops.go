package leasestore

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Acquire grants name to owner for ttl as a new generation in state
// pending, held by replica holder and bound to the API client that asked
// (Lease.Client). It fails with a *HeldError when another grant is
// unexpired. gate is the route pattern whose rollout state must allow the
// client (a direct client's; "" for a fenced client): when the pattern is
// not in observe, it fails with a *GatedError (FM21).
func (s *Store) Acquire(ctx context.Context, name, owner string, ttl time.Duration, holder, client, gate string) (Lease, error) {
	if err := s.checkGrant(name, owner, ttl, holder); err != nil {
		return Lease{}, err
	}
	l, err := s.writeOne(ctx, "acquire", qAcquire, name, owner, ttl.Milliseconds(), holder, client, gate)
	if !errors.Is(err, pgx.ErrNoRows) {
		return l, err
	}
	if err := s.gated(ctx, gate); err != nil {
		return Lease{}, err
	}
	cur, gerr := s.Get(ctx, name)
	if gerr != nil {
		return Lease{}, gerr
	}
	return Lease{}, &HeldError{Name: name, Owner: cur.OwnerID, Token: cur.Token, ExpiresAt: cur.ExpiresAt}
}

// Regenerate gives the current owner of token a new generation (a new,
// larger token, state pending) held by replica holder and bound to client,
// with a fresh ttl. It fails with a *LostError unless token is the current,
// active, unexpired token of owner, and with a *GatedError as Acquire.
// Whether client may act for the generation's own client is the caller's
// to decide (Lease.Client of token never changes).
func (s *Store) Regenerate(ctx context.Context, name, owner string, token int64, ttl time.Duration, holder, client, gate string) (Lease, error) {
	if err := s.checkGrant(name, owner, ttl, holder); err != nil {
		return Lease{}, err
	}
	if err := checkToken(token); err != nil {
		return Lease{}, err
	}
	l, err := s.writeOne(ctx, "regenerate", qRegenerate, name, owner, token, ttl.Milliseconds(), holder, client, gate)
	return l, s.refusedIfNoRows(ctx, err, name, owner, token, gate)
}

// Activate marks the pending grant token active and records the producer id
// and epoch bound to it. It fails with a *LostError when token is no longer
// the current pending, unexpired grant (FM06).
func (s *Store) Activate(ctx context.Context, name string, token, producerID int64, epoch int16) (Lease, error) {
	if err := checkToken(token); err != nil {
		return Lease{}, err
	}
	l, err := s.writeOne(ctx, "activate", qActivate, name, token, producerID, epoch)
	return l, s.lostIfNoRows(ctx, err, name, "", token)
}

// Renew extends owner's active lease to ttl from now (database time). An
// expired lease is never renewed, even with the right token (FM03); gate
// is as Acquire's. Renewals that reach the store while another renewal
// statement runs share the next statement (Config.RenewBatch); each
// caller still gets its own row's answer.
func (s *Store) Renew(ctx context.Context, name, owner string, token int64, ttl time.Duration, gate string) (Lease, error) {
	if err := s.checkTTL(ttl); err != nil {
		return Lease{}, err
	}
	if err := checkToken(token); err != nil {
		return Lease{}, err
	}
	var l Lease
	var err error
	if s.cfg.RenewBatch == 1 {
		s.renewals.statements.Add(1)
		l, err = s.writeOne(ctx, "renew", qRenew, name, owner, token, ttl.Milliseconds(), gate)
	} else {
		l, err = s.renewCoalesced(&renewal{ctx: ctx, name: name, owner: owner, gate: gate, token: token, ttlMS: ttl.Milliseconds()})
	}
	return l, s.refusedIfNoRows(ctx, err, name, owner, token, gate)
}

// refusedIfNoRows is lostIfNoRows, but a gate that refused says so first.
func (s *Store) refusedIfNoRows(ctx context.Context, err error, name, owner string, token int64, gate string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		if gerr := s.gated(ctx, gate); gerr != nil {
			return gerr
		}
	}
	return s.lostIfNoRows(ctx, err, name, owner, token)
}

// Release ends owner's active lease now; the row keeps its token. Its
// event records the replica that forwarded the request (ForwardedBy in
// ctx).
func (s *Store) Release(ctx context.Context, name, owner string, token int64) (Lease, error) {
	if err := checkToken(token); err != nil {
		return Lease{}, err
	}
	l, err := s.writeOne(ctx, "release", qRelease, name, owner, token, forwardedBy(ctx))
	return l, s.lostIfNoRows(ctx, err, name, owner, token)
}

// forwardedKey is the context key of ForwardedBy.
type forwardedKey struct{}

// ForwardedBy returns ctx saying that replica forwarded the request: the
// events the request writes record it (lease_events.forwarded_by, FM89).
func ForwardedBy(ctx context.Context, replica string) context.Context {
	return context.WithValue(ctx, forwardedKey{}, replica)
}

// forwardedBy is the replica ForwardedBy put in ctx, or "".
func forwardedBy(ctx context.Context) string {
	by, _ := ctx.Value(forwardedKey{}).(string)
	return by
}

// Abandon ends the pending grant token after a failed handover. It is a
// no-op (nil error) when the grant is no longer pending.
func (s *Store) Abandon(ctx context.Context, name string, token int64) error {
	_, err := s.writeOne(ctx, "abandon", qAbandon, name, token)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	return err
}

// Heartbeat records that replica is alive and reachable at url.
func (s *Store) Heartbeat(ctx context.Context, replica, url string) error {
	if _, err := s.pool.Exec(ctx, qHeartbeat, replica, url); err != nil {
		s.replaceIfStale(err)
		return unavailable("heartbeat", err)
	}
	return nil
}

// Deregister removes replica from the registry (graceful drain).
func (s *Store) Deregister(ctx context.Context, replica string) error {
	if _, err := s.pool.Exec(ctx, qDeregister, replica); err != nil {
		return unavailable("deregister", err)
	}
	return nil
}

// Replica returns the address of replica and whether it heartbeated within
// fresh; ErrNotFound when it never registered.
func (s *Store) Replica(ctx context.Context, replica string, fresh time.Duration) (url string, alive bool, err error) {
	err = s.pool.QueryRow(ctx, qReplica, replica, fresh.Milliseconds()).Scan(&url, &alive)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, ErrNotFound
	}
	if err != nil {
		return "", false, unavailable("replica", err)
	}
	return url, alive, nil
}

// Get returns the lease row of name, or ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (Lease, error) {
	row := s.pool.QueryRow(ctx, qGet, name)
	l, err := scanLease(row, true)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, ErrNotFound
	}
	if err != nil {
		return Lease{}, unavailable("get", err)
	}
	return l, nil
}

// List returns the leases whose name starts with prefix and sorts after
// after ("" for the first page), in byte order of name, at most limit of
// them (at most Config.ListLimit; 0 takes it). A prefix or cursor that no
// name can hold (not UTF-8, a NUL) is an InvalidError: Postgres would
// refuse it, and that is the caller's mistake, not the store's failure.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]Lease, error) {
	if err := CheckListArgs(prefix, after); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > s.cfg.ListLimit {
		limit = s.cfg.ListLimit
	}
	var rows pgx.Rows
	var err error
	if end, ok := prefixEnd(prefix); ok {
		rows, err = s.pool.Query(ctx, qList, prefix, end, after, limit)
	} else {
		rows, err = s.pool.Query(ctx, qListFrom, prefix, after, limit)
	}
	if err != nil {
		return nil, unavailable("list", err)
	}
	defer rows.Close()
	var out []Lease
	for rows.Next() {
		l, err := scanLease(rows, true)
		if err != nil {
			return nil, unavailable("list", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("list", err)
	}
	return out, nil
}

// CheckListArgs refuses a List prefix or cursor that no name can hold
// (not UTF-8, a NUL: Postgres text cannot), with an InvalidError. Callers
// that may not reach List for every request (the gateway, when a client's
// patterns allow nothing under the prefix) check with it too.
func CheckListArgs(prefix, after string) error {
	for _, a := range [...]struct{ field, v string }{{"prefix", prefix}, {"after", after}} {
		if !utf8.ValidString(a.v) || strings.IndexByte(a.v, 0) >= 0 {
			return &InvalidError{Field: a.field, Message: "must be UTF-8 without NUL"}
		}
	}
	return nil
}

// prefixEnd is the least string above every string that starts with
// prefix: prefix with its last rune incremented (UTF-8 keeps code point
// order in byte order, and the result is valid UTF-8, which Postgres
// requires of text). ok is false when there is none: the empty prefix,
// or one of U+10FFFF only, above which no other string sorts.
func prefixEnd(prefix string) (string, bool) {
	for p := prefix; p != ""; {
		r, n := utf8.DecodeLastRuneInString(p)
		p = p[:len(p)-n]
		for r++; r <= utf8.MaxRune; r++ {
			if utf8.ValidRune(r) { // skip the surrogates
				return p + string(r), true
			}
		}
	}
	return "", false
}

// Events returns up to limit newest events of name, newest first.
func (s *Store) Events(ctx context.Context, name string, limit int) ([]Event, error) {
	rows, err := s.pool.Query(ctx, qEvents, name, limit)
	if err != nil {
		return nil, unavailable("events", err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) { return scanEvent(r) })
	if err != nil {
		return nil, unavailable("events", err)
	}
	return evs, nil
}

// writeOne runs one write statement that returns at most one lease row.
// pgx.ErrNoRows is passed through: it means the predicate refused.
func (s *Store) writeOne(ctx context.Context, op, q string, args ...any) (Lease, error) {
	l, err := scanLease(s.pool.QueryRow(ctx, q, args...), false)
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		return l, err
	}
	s.replaceIfStale(err)
	return Lease{}, unavailable(op, err)
}

// lostIfNoRows turns a refused predicate into a *LostError that says why,
// read after the fact (the reason is informative; the refusal is not).
func (s *Store) lostIfNoRows(ctx context.Context, err error, name, owner string, token int64) error {
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	cur, gerr := s.Get(ctx, name)
	if errors.Is(gerr, ErrNotFound) {
		return &LostError{Name: name, Reason: LostNotFound}
	}
	if gerr != nil {
		return gerr
	}
	return &LostError{Name: name, Reason: lostReason(cur, owner, token), Current: cur.Token}
}

func lostReason(cur Lease, owner string, token int64) LostReason {
	switch {
	case cur.Token != token:
		return LostTokenMismatch
	case owner != "" && cur.OwnerID != owner:
		return LostNotOwner
	case cur.State == StateReleased:
		return LostReleased
	case !cur.ExpiresAt.After(cur.Now):
		return LostExpired
	default:
		return LostNotActive
	}
}

type scanner interface{ Scan(dest ...any) error }

func scanLease(row scanner, withNow bool) (Lease, error) {
	var l Lease
	var ttlMS int64
	var epoch int32
	dest := []any{&l.Name, &l.OwnerID, &l.Token, &l.State, &l.GrantedAt, &l.ExpiresAt,
		&ttlMS, &l.Holder, &l.ProducerID, &epoch, &l.UpdatedAt, &l.PrevToken, &l.PrevOwner, &l.Client}
	if withNow {
		dest = append(dest, &l.Now)
	}
	if err := row.Scan(dest...); err != nil {
		return Lease{}, err
	}
	l.TTL = time.Duration(ttlMS) * time.Millisecond
	l.ProducerEpoch = int16(epoch)
	return l, nil
}
