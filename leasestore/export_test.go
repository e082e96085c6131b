package leasestore

// WorkerPath exposes the statements PrepareConn prepares to the tests.
var WorkerPath = workerPath
