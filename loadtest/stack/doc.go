// Package stack brings up what the load harness drives: a fresh database
// on a Postgres server, a broker (kfake in process, or an external
// cluster), one or more gateways and a materializer, in this process
// (StartEmbedded, StartEmbeddedOn), with the gateways as child processes
// that faults can kill, freeze and drain (StartEmbeddedReplicas; with
// WithBalancer, behind an HAProxy child process whose address,
// BalancerURL, the workers use, and sharing a replica credential so that
// they forward to the holder), or with
// every component a child process whose CPU and memory it samples from
// /proc (StartSeparateProcesses, StartSampling). External describes a
// running gateway instead.
//
// It guarantees that the harness targets loopback only (External refuses
// anything else), that children get their secrets (barrier key, SASL
// password) in the environment and never in argv, and that Close stops
// everything it started, in reverse order. The children are the fencegate
// binary's own commands: serve, materialize, and the hidden CommandDevBroker
// and CommandBaseline, implemented in one file, cmd/fencegate/hidden.go.
//
// It must never target anything but loopback, put a secret in a child's
// argv, or leave a process it started running after Close.
//
// No production package imports it; `fencegate loadtest` and the tests of
// cmd/fencegate and loadtest do.
package stack
