package leasestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/txnmap"
)

// RolloutState is where a route pattern stands in the move of its fleet
// onto the gateway (docs/rollout.md#rollout, FM21).
type RolloutState string

// The rollout states, in the order a rollout walks them.
const (
	// Observe: direct clients are granted and renewed leases; the
	// materializer keeps what it would refuse, marked.
	Observe RolloutState = "observe"
	// Gated: direct clients are refused at acquire, renew and
	// regenerate; their live leases lapse within one TTL.
	Gated RolloutState = "gated"
	// Enforced: as gated, and the materializer refuses unstamped and
	// stale records. A pattern with no recorded state is enforced.
	Enforced RolloutState = "enforced"
)

// ParseRolloutState reads a state's name.
func ParseRolloutState(s string) (RolloutState, error) {
	switch st := RolloutState(s); st {
	case Observe, Gated, Enforced:
		return st, nil
	}
	return "", &InvalidError{Field: "state", Message: fmt.Sprintf("%q is not observe, gated or enforced", s)}
}

// rank orders the states: a rollout moves up one step at a time.
func (s RolloutState) rank() int {
	switch s {
	case Observe:
		return 0
	case Gated:
		return 1
	}
	return 2
}

// Rollout is a route pattern's recorded state. Version grows with every
// change (a sequence: a rolled-back change burns its value); 0 means
// nothing was ever recorded (the state is then Enforced).
type Rollout struct {
	Pattern   string
	State     RolloutState
	Version   int64
	ChangedAt time.Time
	ChangedBy string
	Reason    string
}

// RolloutChange asks SetRollout to move Pattern to To.
type RolloutChange struct {
	Pattern string
	To      RolloutState
	// Actor is who asks (an admin client's name, or the operator's
	// user), recorded in rollout_events.
	Actor  string
	Reason string
	// Force overrides the precondition of enforced (no live lease of the
	// pattern held by a direct client) and of skipping gated; it needs a
	// Reason.
	Force bool
	// DirectClients names the config's clients that write Kafka
	// themselves: the leases they hold are what enforced waits for.
	DirectClients []string
	// PatternOf is the deployment's route lookup (txnmap.Router.PatternOf):
	// a lease is of the route its name is routed to, not of every pattern
	// its name matches (FM87). Nil treats Pattern as the only route.
	PatternOf func(name string) (string, bool)
}

// StepError says why a rollout step was refused: the current state, and
// the direct clients' live leases that block enforced.
type StepError struct {
	Pattern  string
	From, To RolloutState
	Why      string
	Blocking []Lease
}

// Error names the step and why it was refused.
func (e *StepError) Error() string {
	return fmt.Sprintf("rollout %q: %s -> %s refused: %s", e.Pattern, e.From, e.To, e.Why)
}

// RolloutOf returns the recorded state of pattern (Enforced, version 0,
// when none was recorded).
func (s *Store) RolloutOf(ctx context.Context, pattern string) (Rollout, error) {
	r, err := scanRollout(s.pool.QueryRow(ctx, qRollout, pattern))
	if errors.Is(err, pgx.ErrNoRows) {
		return Rollout{Pattern: pattern, State: Enforced}, nil
	}
	if err != nil {
		return Rollout{}, unavailable("rollout", err)
	}
	return r, nil
}

// Rollouts returns every recorded state, by pattern.
func (s *Store) Rollouts(ctx context.Context) ([]Rollout, error) {
	rows, err := s.pool.Query(ctx, qRollouts)
	if err != nil {
		return nil, unavailable("rollouts", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Rollout, error) { return scanRollout(r) })
	if err != nil {
		return nil, unavailable("rollouts", err)
	}
	return out, nil
}

// SetRollout moves a pattern's state and records the change, in one
// transaction that holds the pattern's row lock throughout: grants and
// renewals of direct clients wait for it, and a change of two operators
// at once is serialised. during runs under the lock once the step is
// allowed, with the state to be recorded (the caller writes the rollout
// markers the materializer reads); its error rolls the change back.
//
// Moving up is one step at a time (observe -> gated -> enforced; Force
// with a Reason skips gated); moving down to any earlier state is always
// allowed. Enforced needs no live lease of the pattern held by a client
// of DirectClients, unless Force. Asking for the state in force records
// it again (a new version: a way to rewrite lost markers).
func (s *Store) SetRollout(ctx context.Context, ch RolloutChange, during func(context.Context, Rollout) error) (Rollout, error) {
	if err := txnmap.ValidatePattern(ch.Pattern); err != nil {
		return Rollout{}, &InvalidError{Field: "pattern", Message: err.Error()}
	}
	if ch.Actor == "" {
		return Rollout{}, &InvalidError{Field: "actor", Message: "a change of state needs who asks"}
	}
	if err := checkReason(ch.Reason, ch.Force); err != nil {
		return Rollout{}, err
	}
	var out Rollout
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, err := lockRollout(ctx, tx, ch.Pattern)
		if err != nil {
			return err
		}
		if err := s.checkStep(ctx, tx, cur, ch); err != nil {
			return err
		}
		out = Rollout{Pattern: ch.Pattern, State: ch.To, ChangedBy: ch.Actor, Reason: ch.Reason}
		if err := tx.QueryRow(ctx, qNextRolloutVersion).Scan(&out.Version); err != nil {
			return err
		}
		if during != nil {
			if err := during(ctx, out); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, qRecordRollout, ch.Pattern, ch.To, out.Version, ch.Actor, ch.Reason,
			cur.State, ch.Force).Scan(&out.ChangedAt)
	})
	var step *StepError
	var inv *InvalidError
	if err != nil && !errors.As(err, &step) && !errors.As(err, &inv) {
		return Rollout{}, unavailable("set rollout", err)
	}
	return out, err
}

// MaxReasonBytes bounds a rollout step's reason: the audit row keeps it
// and every status shows it.
const MaxReasonBytes = 1024

// checkReason refuses a reason the audit cannot keep as one: longer than
// MaxReasonBytes, or with a control character (a line break forges a
// log line); and a forced step without a reason that says something
// (blank is none, FM92).
func checkReason(reason string, force bool) error {
	switch {
	case len(reason) > MaxReasonBytes:
		return &InvalidError{Field: "reason", Message: fmt.Sprintf("%d bytes; at most %d", len(reason), MaxReasonBytes)}
	case strings.IndexFunc(reason, unicode.IsControl) >= 0 || !utf8.ValidString(reason):
		return &InvalidError{Field: "reason", Message: "must be UTF-8 text without control characters"}
	case force && strings.TrimSpace(reason) == "":
		return &InvalidError{Field: "reason", Message: "a forced step needs a reason"}
	}
	return nil
}

// lockRollout reads pattern's row FOR UPDATE, creating it (enforced,
// version 0 in memory) when absent so there is a row to lock.
func lockRollout(ctx context.Context, tx pgx.Tx, pattern string) (Rollout, error) {
	if _, err := tx.Exec(ctx, qEnsureRollout, pattern); err != nil {
		return Rollout{}, err
	}
	r, err := scanRollout(tx.QueryRow(ctx, qLockRollout, pattern))
	if err != nil {
		return Rollout{}, err
	}
	if r.ChangedBy == "" { // the row qEnsureRollout made: nothing recorded yet
		r.Version = 0
	}
	return r, nil
}

// checkStep refuses a step up of more than one state without Force, and
// enforced while a direct client holds a live lease of the pattern.
func (s *Store) checkStep(ctx context.Context, tx pgx.Tx, cur Rollout, ch RolloutChange) error {
	step := &StepError{Pattern: ch.Pattern, From: cur.State, To: ch.To}
	if ch.To.rank() > cur.State.rank()+1 && !ch.Force {
		step.Why = fmt.Sprintf("one step at a time: %s comes first (or --force with a reason)", Gated)
		return step
	}
	if ch.To != Enforced || ch.Force {
		return nil
	}
	held, err := directLeases(ctx, tx, ch.Pattern, ch.DirectClients, ch.PatternOf)
	if err != nil {
		return err
	}
	if len(held) > 0 {
		step.Why = fmt.Sprintf("%d lease(s) of the pattern are still held by direct clients; the last lapses at %s",
			len(held), lastExpiry(held).UTC().Format(time.RFC3339))
		step.Blocking = held
		return step
	}
	return nil
}

// DirectLeases lists the live leases of the route whose pattern is
// pattern whose generation was granted to one of clients (the config's
// direct clients). patternOf is as RolloutChange.PatternOf.
func (s *Store) DirectLeases(ctx context.Context, pattern string, clients []string, patternOf func(string) (string, bool)) ([]Lease, error) {
	out, err := directLeases(ctx, s.pool, pattern, clients, patternOf)
	if err != nil {
		return nil, unavailable("direct leases", err)
	}
	return out, nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func directLeases(ctx context.Context, q querier, pattern string, clients []string, patternOf func(string) (string, bool)) ([]Lease, error) {
	if len(clients) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, qDirectLeases, txnmap.LiteralPrefix(pattern), clients)
	if err != nil {
		return nil, err
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Lease, error) { return scanLease(r, true) })
	if err != nil {
		return nil, err
	}
	var out []Lease
	for _, l := range all {
		if routedTo(l.Name, pattern, patternOf) {
			out = append(out, l)
		}
	}
	return out, nil
}

// routedTo says whether the lease name is of the route whose pattern is
// pattern: a lease of a more specific route listed first is that
// route's, and does not hold back this one's enforce (FM87).
func routedTo(name, pattern string, patternOf func(string) (string, bool)) bool {
	if patternOf == nil {
		return txnmap.Match(pattern, name)
	}
	got, ok := patternOf(name)
	return ok && got == pattern
}

// lastExpiry is when the last of leases lapses.
func lastExpiry(leases []Lease) time.Time {
	var last time.Time
	for _, l := range leases {
		if l.ExpiresAt.After(last) {
			last = l.ExpiresAt
		}
	}
	return last
}

// gated returns a *GatedError when pattern is set ("" is a fenced
// client) and its state is not observe.
func (s *Store) gated(ctx context.Context, pattern string) error {
	if pattern == "" {
		return nil
	}
	r, err := s.RolloutOf(ctx, pattern)
	if err != nil {
		return err
	}
	if r.State != Observe {
		return &GatedError{Pattern: pattern, State: r.State}
	}
	return nil
}

func scanRollout(row scanner) (Rollout, error) {
	var r Rollout
	err := row.Scan(&r.Pattern, &r.State, &r.Version, &r.ChangedAt, &r.ChangedBy, &r.Reason)
	return r, err
}

// ForgetRollouts forgets every pattern's rollout state (development only:
// a development broker starts empty, without the markers the states
// wrote, so its ledger judges every pattern enforced; the audit rows of
// rollout_events stay).
func (s *Store) ForgetRollouts(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, qForgetRollouts); err != nil {
		return unavailable("forget rollouts", err)
	}
	return nil
}
