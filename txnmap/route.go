package txnmap

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Rule picks a partition from a lease name.
type Rule string

const (
	// RuleNumber takes the decimal number at the end of the name
	// ("shard:8841" -> 8841) modulo the partition count.
	RuleNumber Rule = "number"
	// RuleMurmur2 hashes the name like Kafka's default partitioner:
	// (murmur2(name) & 0x7fffffff) modulo the partition count.
	RuleMurmur2 Rule = "murmur2"
)

// Route sends lease names matching Pattern to Topic.
type Route struct {
	// Pattern is a glob over lease names ("shard:*"); see Match.
	Pattern string `yaml:"pattern" json:"pattern"`
	// Topic receives the records of matching leases.
	Topic string `yaml:"topic" json:"topic"`
	// Partitions is the partition count of Topic.
	Partitions int32 `yaml:"partitions" json:"partitions"`
	// Rule picks the partition (default RuleNumber).
	Rule Rule `yaml:"partition_rule" json:"partition_rule"`
}

// Placement is where a lease's records go.
type Placement struct {
	Name            string
	TransactionalID string
	Topic           string
	Partition       int32
	// Partitions is the partition count Partition was chosen under (the
	// route's); a barrier signs it, so that it is judged by the placement
	// it was written under after the route grows.
	Partitions int32
}

// ErrNoRoute is returned (wrapped) when no route matches a lease name.
var ErrNoRoute = errors.New("no route for lease")

// Router resolves lease names to placements. It is immutable and safe for
// concurrent use.
type Router struct {
	prefix string
	routes []Route
}

// NewRouter validates prefix and routes; routes are tried in order.
func NewRouter(prefix string, routes []Route) (*Router, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	out := make([]Route, len(routes))
	for i, r := range routes {
		if r.Rule == "" {
			r.Rule = RuleNumber
		}
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("route %d (%q): %w", i, r.Pattern, err)
		}
		out[i] = r
	}
	return &Router{prefix: prefix, routes: out}, nil
}

func (r Route) validate() error {
	if err := ValidatePattern(r.Pattern); err != nil {
		return fmt.Errorf("bad pattern: %w", err)
	}
	if r.Topic == "" {
		return fmt.Errorf("empty topic")
	}
	if r.Partitions < 1 {
		return fmt.Errorf("partitions must be >= 1")
	}
	if r.Rule != RuleNumber && r.Rule != RuleMurmur2 {
		return fmt.Errorf("partition_rule must be %q or %q", RuleNumber, RuleMurmur2)
	}
	return nil
}

// Prefix is the transactional.id prefix of this router.
func (r *Router) Prefix() string { return r.prefix }

// Routes returns a copy of the routes.
func (r *Router) Routes() []Route { return append([]Route(nil), r.routes...) }

// PatternOf returns the pattern of the first route matching name, the
// route whose rollout state judges direct clients on it (FM21).
func (r *Router) PatternOf(name string) (string, bool) {
	for _, rt := range r.routes {
		if Match(rt.Pattern, name) {
			return rt.Pattern, true
		}
	}
	return "", false
}

// Resolve validates name and returns its placement from the first matching
// route.
func (r *Router) Resolve(name string) (Placement, error) { return r.resolve(name, 0) }

// ResolveUnder returns name's placement from the first matching route as
// if that route had partitions partitions (>= 1): where the route's rule
// put the lease before the route's partition count changed. It is the one
// rule for a barrier written under an older partition count.
func (r *Router) ResolveUnder(name string, partitions int32) (Placement, error) {
	if partitions < 1 {
		return Placement{}, fmt.Errorf("partitions must be >= 1, got %d", partitions)
	}
	return r.resolve(name, partitions)
}

// resolve is Resolve with the matching route's partition count replaced
// by partitions unless it is 0.
func (r *Router) resolve(name string, partitions int32) (Placement, error) {
	tid, err := TransactionalID(r.prefix, name)
	if err != nil {
		return Placement{}, err
	}
	for _, rt := range r.routes {
		if !Match(rt.Pattern, name) {
			continue
		}
		if partitions != 0 {
			rt.Partitions = partitions
		}
		p, err := rt.partition(name)
		if err != nil {
			return Placement{}, err
		}
		return Placement{Name: name, TransactionalID: tid, Topic: rt.Topic, Partition: p, Partitions: rt.Partitions}, nil
	}
	return Placement{}, fmt.Errorf("%w %q", ErrNoRoute, name)
}

func (r Route) partition(name string) (int32, error) {
	if r.Rule == RuleMurmur2 {
		return int32(int64(Murmur2([]byte(name))&0x7fffffff) % int64(r.Partitions)), nil
	}
	n, err := trailingNumber(name)
	if err != nil {
		return 0, err
	}
	return int32(n % uint64(r.Partitions)), nil
}

func trailingNumber(name string) (uint64, error) {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	if i == len(name) {
		return 0, fmt.Errorf("%w: %q does not end in a number (partition rule %q)", ErrInvalidName, name, RuleNumber)
	}
	n, err := strconv.ParseUint(name[i:], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: number out of range", ErrInvalidName, name)
	}
	return n, nil
}

// Match reports whether a lease name matches a glob pattern ('*' any run
// of bytes, '?' one byte, '[...]' a class). It is the one matcher for
// routes and for client authorisation.
//
// A malformed pattern matches nothing; ValidatePattern refuses it at load.
func Match(pattern, name string) bool {
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}

// ValidatePattern refuses a pattern Match cannot read (path.ErrBadPattern:
// an unclosed '[', a trailing backslash) or the empty pattern: either would
// match no lease, silently.
func ValidatePattern(pattern string) error {
	if pattern == "" {
		return errors.New("empty pattern")
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return err
	}
	return nil
}

// LiteralPrefix is the bytes of pattern before its first metacharacter
// ('*', '?', '[' or the escape '\\'): every name that Match(pattern, name)
// accepts starts with it. A store narrows a scan to the names under it;
// Match still decides each name (FM40).
func LiteralPrefix(pattern string) string {
	if i := strings.IndexAny(pattern, `*?[\`); i >= 0 {
		return pattern[:i]
	}
	return pattern
}

// Murmur2 is the 32-bit murmur2 hash with Kafka's seed, as Kafka's default
// partitioner computes it.
func Murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	for len(data) >= 4 {
		k := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		data = data[4:]
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// CheckPartitions says why a topic of has partitions cannot carry r, or
// nil: with more named than the topic has, a lease placed beyond it fails
// at Kafka ("Unknown partition"); with fewer, partitions stay unused and
// unread. The one comparison of a route with its topic (FM31).
func (r Route) CheckPartitions(has int32) error {
	if has == r.Partitions {
		return nil
	}
	return fmt.Errorf("route %q names %d partitions but topic %s has %d", r.Pattern, r.Partitions, r.Topic, has)
}
