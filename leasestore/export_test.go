package leasestore

// WorkerPath exposes the statements PrepareConn prepares to the tests.
var WorkerPath = workerPath

// PrefixEnd exposes the upper bound of a prefix scan to the tests.
var PrefixEnd = prefixEnd

// EventsRangeQuery exposes the statement and arguments of EventsRange to
// the tests (to EXPLAIN it).
func (s *Store) EventsRangeQuery(prefixes []string, after, upto int64, limit int) (string, []any) {
	return eventsRangeQuery(prefixes, after, upto, limit)
}

// RenewStatements is the number of renewal statements s has sent.
func RenewStatements(s *Store) int64 { return s.renewals.statements.Load() }

// RenewalsWaiting is the number of renewals queued for s's next statement.
func RenewalsWaiting(s *Store) int {
	s.renewals.mu.Lock()
	defer s.renewals.mu.Unlock()
	return len(s.renewals.waiting)
}
