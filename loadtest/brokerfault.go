package loadtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencegate/fencegate/internal/kafkadev"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/txnmap"
)

// The broker faults (--kafka-cluster --broker-fault-every, issue 39): on
// the harness's own three-node Apache Kafka cluster, one fault at a time,
// in this order, round after round, while the workers write, hand over
// and churn and one gateway replica is frozen now and then. After each
// fault the cluster must become whole again (every partition of the lease
// topic and of __transaction_state led, its ISR full), and then every
// lease must be served again within one TTL: the TTL bounds fencegate's
// recovery, not a JVM's restart on a loaded machine. The run's checks
// (the history checker, I1-I4, the ledger, the trusted topic) then judge
// every answer given across all of them.

// brokerFaultEntry is the broker-fault scenario of the table.
func brokerFaultEntry() entry {
	return entry{name: "broker-fault", proves: "on a three-node Apache Kafka cluster, each broker fault heals, the cluster is whole again and every lease is served within one TTL after it",
		flags:    []string{"--kafka-cluster", "--broker-fault-every", "--broker-fault-rounds", "--broker-faults"},
		on:       func(sc Scenario, _ *stack.Stack) bool { return sc.BrokerFaultEvery > 0 },
		fault:    named("broker faults"),
		validate: (*Scenario).validateBrokerFaults,
		needs: func(_ Scenario, s *stack.Stack) error {
			if s.KafkaCluster() == nil {
				return errors.New("broker_fault_every needs the harness's own Apache Kafka cluster (--kafka-cluster)")
			}
			return nil
		},
		start:   func(r *runner, p *phase) error { return r.brokerFaults(p.faultCtx, p.ctx, p.faults, p.end) },
		figures: func(r *runner, rep *report.Report, _ time.Time) { rep.BrokerFaults = r.brokerFaultFigures() },
		check:   checkKafkaReader,
		report:  "broker_faults"}
}

// brokerFault is one kind of fault: strike applies it, busy being the
// placement of a lease with traffic, and returns how to heal it.
type brokerFault struct {
	kind   string
	strike func(ctx context.Context, c *kafkadev.Cluster, adm *kafkadev.Admin, busy txnmap.Placement) (heal func() error, err error)
}

// holdUntilDropped holds a paused or cut-off node n so until every other
// node has dropped it from its metadata (it missed its broker session:
// the quorum fenced it, and its partitions and transaction coordinators
// moved), for at most wholeBound; the fault is healed either way. A
// node never dropped is an error (the fault did not do what it is named
// for); the run's end is not.
func holdUntilDropped(ctx context.Context, c *kafkadev.Cluster, adm *kafkadev.Admin, n int, undo func()) (func() error, error) {
	wctx, cancel := context.WithTimeout(ctx, wholeBound)
	defer cancel()
	_, err := adm.WaitDropped(wctx, n, c.Nodes())
	if ctx.Err() != nil {
		err = nil
	}
	return func() error { undo(); return nil }, err
}

var brokerFaults = []brokerFault{
	{"kill-coordinator", func(ctx context.Context, c *kafkadev.Cluster, adm *kafkadev.Admin, busy txnmap.Placement) (func() error, error) {
		n, err := adm.Coordinator(ctx, busy.TransactionalID)
		return killNode(c, n, err)
	}},
	{"kill-leader", func(ctx context.Context, c *kafkadev.Cluster, adm *kafkadev.Admin, busy txnmap.Placement) (func() error, error) {
		n, err := adm.Leader(ctx, busy.Topic, busy.Partition)
		return killNode(c, n, err)
	}},
	{"pause-past-session", func(ctx context.Context, c *kafkadev.Cluster, adm *kafkadev.Admin, busy txnmap.Placement) (func() error, error) {
		n, err := adm.Leader(ctx, busy.Topic, busy.Partition)
		if err != nil {
			return nil, err
		}
		resume, err := c.Pause(n)
		if err != nil {
			return nil, err
		}
		return holdUntilDropped(ctx, c, adm, n, resume)
	}},
	{"cut-off", func(ctx context.Context, c *kafkadev.Cluster, adm *kafkadev.Admin, busy txnmap.Placement) (func() error, error) {
		n, err := adm.Coordinator(ctx, busy.TransactionalID)
		if err != nil {
			return nil, err
		}
		heal, err := c.Isolate(n)
		if err != nil {
			return nil, err
		}
		return holdUntilDropped(ctx, c, adm, n, heal)
	}},
	{"kill-controller", func(ctx context.Context, c *kafkadev.Cluster, adm *kafkadev.Admin, _ txnmap.Placement) (func() error, error) {
		n, err := adm.ActiveController(ctx)
		return killNode(c, n, err)
	}},
	{"rolling-restart", func(ctx context.Context, c *kafkadev.Cluster, adm *kafkadev.Admin, _ txnmap.Placement) (func() error, error) {
		for n := 1; n <= c.Nodes(); n++ {
			if err := c.Stop(n); err != nil {
				return c.Start, err
			}
			if err := c.Start(); err != nil {
				return nil, err
			}
			// The next node stops only once this one is back in every
			// ISR, as an operator's rolling restart does: with min ISR
			// 2, two nodes out at once is an outage, not a restart.
			if err := waitWhole(ctx, adm); err != nil {
				return nil, err
			}
		}
		return func() error { return nil }, nil
	}},
}

// BrokerFaultKinds are the broker faults' names, in the order they strike.
func BrokerFaultKinds() []string {
	out := make([]string, len(brokerFaults))
	for i, f := range brokerFaults {
		out[i] = f.kind
	}
	return out
}

func (s *Scenario) validateBrokerFaults() error {
	kinds := BrokerFaultKinds()
	for _, k := range s.BrokerFaults {
		if !slices.Contains(kinds, k) {
			return fmt.Errorf("broker_faults: %q is not one of %v", k, kinds)
		}
	}
	switch {
	case s.BrokerFaultEvery < 0 || s.BrokerFaultRounds < 0:
		return errors.New("broker_fault_every and broker_fault_rounds must be >= 0")
	case s.BrokerFaultEvery == 0 && (s.BrokerFaultRounds > 0 || len(s.BrokerFaults) > 0):
		return errors.New("broker_fault_rounds and broker_faults need broker_fault_every")
	}
	return nil
}

// strikes are the scenario's broker faults, in order.
func (s Scenario) strikes() []brokerFault {
	var out []brokerFault
	for _, f := range brokerFaults {
		if len(s.BrokerFaults) == 0 || slices.Contains(s.BrokerFaults, f.kind) {
			out = append(out, f)
		}
	}
	return out
}

// killNode sends SIGKILL to node n (found with err) and heals by starting
// it again.
func killNode(c *kafkadev.Cluster, n int, err error) (func() error, error) {
	if err != nil {
		return nil, err
	}
	return c.Start, c.Kill(n)
}

// wholeBound bounds the wait for the cluster to become whole after a
// fault: a cluster that never heals ends the faults, a slow JVM restart
// does not.
const wholeBound = 5 * time.Minute

// waitWhole waits until the cluster is whole, for at most wholeBound
// (past ctx's end: a fault is healed and waited for even as the run ends).
func waitWhole(ctx context.Context, adm *kafkadev.Admin) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wholeBound)
	defer cancel()
	return adm.WaitHealthy(wctx, 3, stack.LeaseTopic)
}

// brokerFaultState is the broker faults' part of a run.
type brokerFaultState struct {
	mu  sync.Mutex
	rep *report.BrokerFaults
}

// brokerFaults strikes the broker faults one at a time until faultCtx
// ends: BrokerFaultEvery after the last was judged, and ends the gateway
// phase (endPhase) after BrokerFaultRounds rounds (0: the duration
// decides). The workers run until phaseCtx ends, and a fault's
// judgement waits on them.
func (r *runner) brokerFaults(faultCtx, phaseCtx context.Context, wg *sync.WaitGroup, endPhase context.CancelFunc) error {
	c := r.stack.KafkaCluster()
	adm, err := c.NewAdmin()
	if err != nil {
		return err
	}
	r.bf.rep = &report.BrokerFaults{Broker: "Apache Kafka 4.4, three KRaft nodes behind fault proxies (replication factor 3, min ISR 2)",
		EverySeconds: r.sc.BrokerFaultEvery.Seconds(), TTLSeconds: r.sc.TTL.Seconds(), Faults: map[string]int{}}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer adm.Close()
		for i := 0; ; i++ {
			wait(faultCtx, r.sc.BrokerFaultEvery)
			if faultCtx.Err() != nil || !r.brokerFault(faultCtx, phaseCtx, c, adm, i) {
				return
			}
			if r.sc.BrokerFaultRounds > 0 && i+1 == r.sc.BrokerFaultRounds*len(r.sc.strikes()) {
				endPhase()
				return
			}
		}
	}()
	return nil
}

// brokerFault strikes the i-th fault, heals it, waits for the cluster to
// be whole and judges the fleet's recovery. It returns false when the
// faults must stop: the cluster never became whole.
func (r *runner) brokerFault(faultCtx, phaseCtx context.Context, c *kafkadev.Cluster, adm *kafkadev.Admin, i int) bool {
	strikes := r.sc.strikes()
	f := strikes[i%len(strikes)]
	busy, err := r.stack.Router.Resolve(fmt.Sprintf("shard:%d", i%r.sc.Leases))
	if err != nil {
		r.brokerFaultError(f.kind, err)
		return true
	}
	// No replica freeze strikes meanwhile, and no worker freeze.
	r.bal.serial.Lock()
	defer r.bal.serial.Unlock()
	// The worker freezes are held off while a fault is judged: a lease
	// whose holder sleeps past its TTL is not served within one TTL of
	// anything.
	r.holdWorkerFreezes(faultCtx, true)
	defer r.holdWorkerFreezes(faultCtx, false)
	start := time.Now()
	heal, err := f.strike(faultCtx, c, adm, busy)
	if heal != nil {
		err = errors.Join(err, heal())
	}
	if err != nil {
		r.brokerFaultError(f.kind, err)
	} else {
		r.countBrokerFault(f.kind, i)
	}
	if err := waitWhole(faultCtx, adm); err != nil {
		r.brokerFaultError(f.kind, err)
		r.bf.mu.Lock()
		r.bf.rep.NotWhole++
		r.bf.mu.Unlock()
		return false
	}
	whole := time.Now()
	served, late, ended := r.servedAgain(phaseCtx, whole)
	r.judgeBrokerFault(f.kind, whole.Sub(start), served, late, ended)
	return true
}
