package leasestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// State of a lease row.
type State string

// The states of a lease row; expiry is not a state (Lease.ExpiresAt).
const (
	StatePending  State = "pending"
	StateActive   State = "active"
	StateReleased State = "released"
)

// Lease is one row of the leases table.
type Lease struct {
	Name          string
	OwnerID       string
	Token         int64
	State         State
	GrantedAt     time.Time
	ExpiresAt     time.Time
	TTL           time.Duration
	Holder        string
	ProducerID    int64 // -1 until activated
	ProducerEpoch int16 // -1 until activated
	UpdatedAt     time.Time
	// PrevToken and PrevOwner describe the generation this grant
	// superseded (0 and "" for a first grant).
	PrevToken int64
	PrevOwner string
	// Client is the API client whose request granted this generation
	// ("" for one granted before it was recorded): the owner id is bound
	// to it.
	Client string
	// Now is the database time at which the row was read (Get and List only).
	Now time.Time
}

// Live reports whether the lease was unexpired when it was read.
func (l Lease) Live() bool { return l.State != StateReleased && l.ExpiresAt.After(l.Now) }

// Holds returns nil when owner's token is l's current, active, unexpired
// generation (as of l.Now, the database's time when l was read), else the
// *LostError that says why.
func (l Lease) Holds(owner string, token int64) error {
	if l.Token == token && l.OwnerID == owner && l.State == StateActive && l.ExpiresAt.After(l.Now) {
		return nil
	}
	return &LostError{Name: l.Name, Reason: lostReason(l, owner, token), Current: l.Token}
}

// Event is one row of lease_events.
type Event struct {
	ID            int64
	Name          string
	Kind          string
	Token         int64
	OwnerID       string
	Holder        string
	ProducerID    int64
	ProducerEpoch int16
	ExpiresAt     time.Time
	At            time.Time
	// Client is the API client of the generation the event is about ("":
	// not recorded, before migration 0007; a superseded event names the
	// superseded generation's client since migration 0009).
	Client string
	// ForwardedBy names the replica that forwarded the request that made
	// the event ("": served where it arrived; FM89).
	ForwardedBy string
}

// Defaults of Config, also the defaults of `fencegate serve --min-ttl` and
// `--max-ttl`. A lease shorter than DefaultMinTTL leaves a handover (a
// share of the TTL) too little time to bump the epoch and write the
// barrier.
const (
	DefaultMinTTL = 100 * time.Millisecond
	DefaultMaxTTL = 10 * time.Minute
)

// Config bounds what the store accepts. Zero fields take the defaults.
type Config struct {
	// MinTTL is the shortest lease accepted (default DefaultMinTTL, at
	// least 1ms).
	MinTTL time.Duration
	// MaxTTL is the longest lease accepted (default DefaultMaxTTL).
	MaxTTL time.Duration
	// ValidateName checks a lease name (default: 1..255 bytes of valid UTF-8
	// without NUL). The gateway passes txnmap.ValidateName.
	ValidateName func(string) error
	// ListLimit caps List results (default 1000).
	ListLimit int
	// RenewBatch caps the renewals that share one statement (default
	// DefaultRenewBatch): renewals that arrive while a renewal statement
	// runs go together in the next one. 1 sends each renewal as its own
	// statement.
	RenewBatch int
	// RenewStatements caps the coalesced renewal statements in flight at
	// once (default DefaultRenewStatements); renewals that arrive while
	// that many run wait for the next.
	RenewStatements int
}

func (c *Config) fill() error {
	if c.MinTTL == 0 {
		c.MinTTL = DefaultMinTTL
	}
	if c.MaxTTL == 0 {
		c.MaxTTL = DefaultMaxTTL
	}
	if c.ValidateName == nil {
		c.ValidateName = storageName
	}
	if c.ListLimit == 0 {
		c.ListLimit = 1000
	}
	if c.RenewBatch == 0 {
		c.RenewBatch = DefaultRenewBatch
	}
	if c.RenewStatements == 0 {
		c.RenewStatements = DefaultRenewStatements
	}
	if c.RenewBatch < 0 || c.RenewStatements < 0 {
		return fmt.Errorf("leasestore: RenewBatch %d or RenewStatements %d is negative", c.RenewBatch, c.RenewStatements)
	}
	if c.MinTTL < time.Millisecond || c.MaxTTL < c.MinTTL {
		return fmt.Errorf("leasestore: need 1ms <= MinTTL (%s) <= MaxTTL (%s)", c.MinTTL, c.MaxTTL)
	}
	return nil
}

// storageName is the weakest name rule: what the table can store.
func storageName(name string) error {
	if name == "" || len(name) > 255 || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return errors.New("must be 1..255 bytes of UTF-8 without NUL")
	}
	return nil
}

// Store is the Postgres lease store. It is safe for concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	cfg      Config
	renewals renewQueue
}

// New returns a Store on pool. It does not touch the database; call Verify
// before serving.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("leasestore: nil pool")
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Store{pool: pool, cfg: cfg}, nil
}

// Verify refuses to run on a token sequence that can hand out a lower token
// after a higher one (I1): its cache must be 1 and it must not cycle.
func (s *Store) Verify(ctx context.Context) error {
	var cache int64
	var cycle bool
	err := s.pool.QueryRow(ctx, qSequenceSettings).Scan(&cache, &cycle)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: sequence lease_token_seq is missing; run `fencegate migrate`", ErrUnsafeSequence)
	}
	if err != nil {
		return unavailable("verify", err)
	}
	if cache != 1 || cycle {
		return fmt.Errorf("%w: lease_token_seq has CACHE %d and CYCLE=%t; tokens could go backwards. "+
			"Fix: ALTER SEQUENCE lease_token_seq CACHE 1 NO CYCLE", ErrUnsafeSequence, cache, cycle)
	}
	return nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, qPing); err != nil {
		return unavailable("ping", err)
	}
	return nil
}

func (s *Store) checkName(name string) error {
	if err := s.cfg.ValidateName(name); err != nil {
		return &InvalidError{Field: "name", Message: err.Error()}
	}
	return nil
}

func (s *Store) checkTTL(ttl time.Duration) error {
	if ttl < s.cfg.MinTTL || ttl > s.cfg.MaxTTL {
		return &InvalidError{Field: "ttl_ms", Message: fmt.Sprintf("must be between %d and %d",
			s.cfg.MinTTL.Milliseconds(), s.cfg.MaxTTL.Milliseconds())}
	}
	if ttl%time.Millisecond != 0 {
		return &InvalidError{Field: "ttl_ms", Message: "must be whole milliseconds"}
	}
	return nil
}

func checkOwner(owner string) error {
	if owner == "" || len(owner) > 255 || !utf8.ValidString(owner) || strings.ContainsRune(owner, 0) {
		return &InvalidError{Field: "owner_id", Message: "must be 1..255 bytes of UTF-8 without NUL"}
	}
	return nil
}

func checkToken(token int64) error {
	if token <= 0 {
		return &InvalidError{Field: "token", Message: "must be a positive integer"}
	}
	return nil
}

// CheckGrant judges the arguments of a grant (Acquire, Regenerate) as
// those calls do, without I/O: a caller that bounds the calls with a
// budget drawn from ttl asks it first, so that a TTL out of bounds is an
// InvalidError however short the budget, not a timeout.
func (s *Store) CheckGrant(name, owner string, ttl time.Duration) error {
	return s.checkGrant(name, owner, ttl, "-")
}

func (s *Store) checkGrant(name, owner string, ttl time.Duration, holder string) error {
	if err := s.checkName(name); err != nil {
		return err
	}
	if err := checkOwner(owner); err != nil {
		return err
	}
	if holder == "" {
		return &InvalidError{Field: "holder", Message: "must not be empty"}
	}
	return s.checkTTL(ttl)
}
