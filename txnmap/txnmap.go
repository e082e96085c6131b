// Package txnmap maps lease names to where their records go: the Kafka
// transactional.id, topic and partition. It does no I/O.
//
// It must never do I/O or import another fencegate package, and never map
// two valid names to one transactional.id.
//
// Guarantees:
//   - ValidateName is the one definition of a lease name anywhere in fencegate.
//   - TransactionalID is injective and reversible for valid names under one
//     prefix (FM18): two lease names never share a transactional.id, so one
//     lease's epoch bump can never fence another lease.
//   - A lease name alone decides its topic and partition; workers cannot
//     choose either.
package txnmap

import (
	"errors"
	"fmt"
	"strings"
)

// MaxNameLen bounds a lease name in bytes. With the prefix it keeps a
// transactional.id well below Kafka's limits.
const MaxNameLen = 200

// MaxPrefixLen bounds the cluster/environment prefix.
const MaxPrefixLen = 64

// idRoot starts every transactional.id fencegate owns, so that one prefixed
// ACL (transactional-id "fencegate/") covers them all.
const idRoot = "fencegate/"

// ErrInvalidName is returned (wrapped) for a name that is not a valid lease
// name.
var ErrInvalidName = errors.New("invalid lease name")

// nameByte reports whether b may appear in a lease name: ASCII letters,
// digits and . _ - :. No '/', which separates prefix and name, and no case
// folding anywhere, so the mapping needs no escaping at all.
func nameByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	case b == '.' || b == '_' || b == '-' || b == ':':
		return true
	}
	return false
}

// ValidateName checks a lease name: 1..MaxNameLen bytes of [A-Za-z0-9._:-].
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalidName, MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("%w: byte %d (%q) is not in [A-Za-z0-9._:-]", ErrInvalidName, i, name[i])
		}
	}
	return nil
}

// ValidatePrefix checks a cluster/environment prefix: the same alphabet as a
// name, 1..MaxPrefixLen bytes.
func ValidatePrefix(prefix string) error {
	if len(prefix) > MaxPrefixLen {
		return fmt.Errorf("prefix longer than %d bytes", MaxPrefixLen)
	}
	if err := ValidateName(prefix); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	return nil
}

// TransactionalID returns "fencegate/<prefix>/<name>". Because neither
// prefix nor name may contain '/', the result splits back uniquely.
func TransactionalID(prefix, name string) (string, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return "", err
	}
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return idRoot + prefix + "/" + name, nil
}

// LeaseName inverts TransactionalID for ids of the given prefix.
func LeaseName(prefix, transactionalID string) (string, error) {
	head := idRoot + prefix + "/"
	name, ok := strings.CutPrefix(transactionalID, head)
	if !ok {
		return "", fmt.Errorf("transactional.id %q does not start with %q", transactionalID, head)
	}
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return name, nil
}

// IDPrefix is the prefix every transactional.id under prefix starts with:
// what a prefixed ACL for the gateway principal names.
func IDPrefix(prefix string) string { return idRoot + prefix + "/" }
