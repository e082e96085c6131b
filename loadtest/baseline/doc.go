// Package baseline holds the harness's yardsticks that need no gateway:
// the direct baseline (one transactional producer per lease, batches
// stamped like the gateway's or plain: the ceiling), the bare-producer
// yardstick (what the client library and the broker can do) and the
// handover yardstick (a new producer, InitTransactions, one record). The
// harness runs the direct one in process (Direct) or, with
// --separate-processes, each in a `fencegate loadtest-baseline` child
// (Child: the harness passes it as flags, the child parses and runs it,
// and prints Output as JSON).
//
// It must never touch a lease, the gateway or Postgres: a baseline is
// what Kafka alone does, so that the gateway's figures have something to
// be measured against; and it must never import the harness's runner
// (package loadtest), so the child links only what it runs.
package baseline
