package leasestore

// WorkerPath exposes the statements PrepareConn prepares to the tests.
var WorkerPath = workerPath

// PrefixEnd exposes the upper bound of a prefix scan to the tests.
var PrefixEnd = prefixEnd
