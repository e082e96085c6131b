package loadtest

import (
	"errors"
	"fmt"
	"os"
	"time"

	"gopkg.in/yaml.v3"
)

// Scenario is one load run. Every loop it drives is bounded by Duration.
type Scenario struct {
	// Leases is the number of leases ("shard:0".."shard:N-1").
	Leases int `yaml:"leases"`
	// WorkersPerLease contend for each lease (1: no contention).
	WorkersPerLease int `yaml:"workers_per_lease"`
	// BatchSize records of RecordSize bytes per batch.
	BatchSize  int `yaml:"batch_size"`
	RecordSize int `yaml:"record_size"`
	// Rate is the target batches/s per lease; 0 is open loop.
	Rate float64 `yaml:"rate"`
	// BatchEvery paces each worker at one batch every BatchEvery instead
	// of as fast as it can (0: Rate decides). It is Rate written as an
	// interval: Validate sets Rate to 1/BatchEvery, so every loop that
	// paces by Rate paces by it.
	BatchEvery time.Duration `yaml:"batch_every"`
	// ColdStart ends the gateway phase once every lease has had its first
	// batch acknowledged (Duration bounds it): all workers acquire at once
	// at the start, and the run measures how long until every lease
	// writes, the handovers per second meanwhile and what they cost.
	ColdStart bool          `yaml:"cold_start"`
	Duration  time.Duration `yaml:"duration"`
	TTL       time.Duration `yaml:"ttl"`
	// RenewEvery is the renewal interval of holders (default TTL/3).
	RenewEvery time.Duration `yaml:"renew_every"`
	// Freeze: every FreezeEvery one holder stops renewing, sleeps past its
	// TTL while another worker takes the lease, then wakes and writes with
	// its old token (the incident). 0: off.
	FreezeEvery time.Duration `yaml:"freeze_every"`
	// ChurnEvery forces a handover of one lease (release, another worker
	// takes it). 0: off.
	ChurnEvery time.Duration `yaml:"churn_every"`
	// AmbiguityEvery holds one EndTxn at the embedded broker past the
	// gateway's commit timeout, so the generation ends and the worker asks
	// for a new one. 0: off. Embedded only.
	AmbiguityEvery time.Duration `yaml:"ambiguity_every"`
	// NetFault applies a network fault (NetFaultKinds) to NetFaultLink
	// (broker, postgres or all) every NetFaultEvery for NetFaultFor
	// (default 2 s), through the stack's fault proxies (the in-process
	// gateway; --net-fault). "": off.
	NetFault      string        `yaml:"net_fault"`
	NetFaultLink  string        `yaml:"net_fault_link"`
	NetFaultEvery time.Duration `yaml:"net_fault_every"`
	NetFaultFor   time.Duration `yaml:"net_fault_for"`
	// KillGatewayAfter kills -9 the gateway child process once, then
	// restarts it. 0: off. Embedded with GatewayChild only.
	KillGatewayAfter time.Duration `yaml:"kill_gateway_after"`
	// FreezeReplicaEvery pauses one gateway replica (a child process) with
	// SIGSTOP, mid-batch under load, for ReplicaPause (default 3 x TTL),
	// while its leases are taken over on another replica, then resumes it
	// (FM25). 0: off. Needs at least two replicas as child processes.
	FreezeReplicaEvery time.Duration `yaml:"freeze_replica_every"`
	ReplicaPause       time.Duration `yaml:"replica_pause"`
	// DrainReplicaAfter sends SIGTERM to the first gateway replica (a child
	// process) once, this long into the run, waits for its graceful drain
	// and exit, and starts it again: a rolling restart under load. Workers
	// re-home to another replica with their tokens. 0: off.
	DrainReplicaAfter time.Duration `yaml:"drain_replica_after"`
	// KillReplicaEvery sends SIGKILL to one gateway replica (a child
	// process) in turn this often, under load, and starts it again at
	// once on the same port under the same replica name. 0: off. Needs
	// two or more replicas.
	KillReplicaEvery time.Duration `yaml:"kill_replica_every"`
	// KillMaterializerEvery sends SIGKILL to the materializer child
	// process this often, mid-chunk when it is busy, and starts it again
	// at once (FM54). 0: off. Separate processes only.
	KillMaterializerEvery time.Duration `yaml:"kill_materializer_every"`
	// TrustedRebalanceEvery starts a second trusted sink instance in the
	// sink's group this often, or stops the one running (SIGTERM: it
	// leaves), so that partitions move between two instances by
	// cooperative rebalances under load (FM56). 0: off. Separate processes
	// with the trusted sink only.
	TrustedRebalanceEvery time.Duration `yaml:"trusted_rebalance_every"`
	// RollingRestart restarts every gateway replica in turn once, a
	// quarter into the run: SIGTERM, its drain and exit, started again
	// and ready (and back in the balancer's rotation), then the next.
	RollingRestart bool `yaml:"rolling_restart"`
	// Body is how workers send batches: "binary" (the compact body the
	// SDK sends, the default) or "json" (what curl sends).
	Body string `yaml:"body"`
	// MixedFleet runs direct workers (old binaries: leases through the
	// API with a direct client's token, their own producer) beside the
	// gateway workers on shard:*, and walks the pattern observe -> gated
	// -> enforced through the admin API, StateDuration in each state
	// (gated longer while a direct lease is live), then applies the ACL
	// plan (RunMixed). The faults and baselines are off. Embedded with the
	// in-process gateway only.
	MixedFleet bool `yaml:"mixed_fleet"`
	// StateDuration is the time in each rollout state (default Duration/3).
	StateDuration time.Duration `yaml:"state_duration"`
	// DirectWorkers is the number of direct workers, one lease each
	// (default 2; at least 2: the first freezes at gate, past its TTL).
	DirectWorkers int `yaml:"direct_workers"`
	// Stateful runs stateful workers: each lease has a deterministic input
	// sequence (item 0, 1, ...); a worker resumes from the lease's
	// checkpoint after every new generation and sends items i..j with the
	// checkpoint j+1, and I6 checks the ledger holds each item once, in
	// order. The naive baseline then runs stateful too, keeping its resume
	// point outside its writes. Needs the materializer (the ledger).
	Stateful bool `yaml:"stateful"`
	// BrokerFaultEvery strikes the broker faults (BrokerFaultKinds), one
	// at a time and in turn, on the harness's own three-node Apache Kafka
	// cluster (stack.SeparateOptions.KafkaCluster): each this long after
	// the last was judged. 0: off.
	BrokerFaultEvery time.Duration `yaml:"broker_fault_every"`
	// BrokerFaultRounds ends the gateway phase after this many rounds of
	// the broker faults (Duration still bounds it). 0: Duration decides.
	BrokerFaultRounds int `yaml:"broker_fault_rounds"`
	// BrokerFaults are the kinds that strike, in BrokerFaultKinds' order
	// (empty: all of them).
	BrokerFaults []string `yaml:"broker_faults"`
	// Baselines to run after the gateway phase ("direct", "naive").
	Direct bool `yaml:"direct"`
	Naive  bool `yaml:"naive"`
}

// The batch bodies workers can send.
const (
	BodyBinary = "binary"
	BodyJSON   = "json"
)

// Defaults is the default scenario of `make loadtest`.
func Defaults() Scenario {
	return Scenario{Leases: 16, WorkersPerLease: 2, BatchSize: 100, RecordSize: 1024, Duration: 20 * time.Second,
		TTL: 2 * time.Second, FreezeEvery: 5 * time.Second, ChurnEvery: 4 * time.Second, Body: BodyBinary, Direct: true, Naive: true}
}

// LoadScenario reads a YAML scenario over the defaults.
func LoadScenario(path string) (Scenario, error) {
	s := Defaults()
	raw, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := yaml.Unmarshal(raw, &s); err != nil {
		return s, fmt.Errorf("scenario: %w", err)
	}
	return s, s.Validate()
}

// rateOf is the batches/s per lease of one batch every d.
func rateOf(d time.Duration) float64 { return float64(time.Second) / float64(d) }

// Validate checks bounds: the harness only ever targets loopback, and
// every loop is bounded.
func (s *Scenario) Validate() error {
	if s.RenewEvery == 0 {
		s.RenewEvery = s.TTL / 3
	}
	if s.Body == "" {
		s.Body = BodyBinary
	}
	if s.BatchEvery > 0 && s.Rate == 0 {
		s.Rate = rateOf(s.BatchEvery)
	}
	for _, e := range scenarios() {
		if e.validate != nil {
			if err := e.validate(s); err != nil {
				return err
			}
		}
	}
	switch {
	case s.Body != BodyBinary && s.Body != BodyJSON:
		return errors.New("body must be binary or json")
	case s.BatchEvery < 0 || s.BatchEvery > time.Hour:
		return errors.New("batch_every must be in [0, 1h]")
	case s.BatchEvery > 0 && s.Rate != rateOf(s.BatchEvery):
		return errors.New("give rate or batch_every, not both")
	case s.Leases < 1 || s.Leases > 10000:
		return errors.New("leases must be 1..10000")
	case s.WorkersPerLease < 1 || s.WorkersPerLease > 16:
		return errors.New("workers_per_lease must be 1..16")
	case s.BatchSize < 1 || s.RecordSize < 0:
		return errors.New("batch_size must be >= 1 and record_size >= 0")
	case s.Duration <= 0 || s.Duration > 24*time.Hour:
		return errors.New("duration must be in (0, 24h]")
	case s.TTL < 100*time.Millisecond:
		return errors.New("ttl must be >= 100ms")
	case s.RenewEvery <= 0 || s.RenewEvery >= s.TTL:
		return errors.New("renew_every must be in (0, ttl)")
	case s.FreezeReplicaEvery < 0 || s.KillReplicaEvery < 0 || s.KillMaterializerEvery < 0 || s.TrustedRebalanceEvery < 0:
		return errors.New("freeze_replica_every, kill_replica_every, kill_materializer_every and trusted_rebalance_every must be >= 0")
	}
	return nil
}
