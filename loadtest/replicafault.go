package loadtest

// The process faults of the gateway (the table's gateway-kill,
// replica-freeze, replica-drain, replica-kill and rolling-restart): a
// gateway child killed -9, replicas frozen, drained, killed or restarted
// in turn under load, each started again. Behind a balancer their
// re-serve gaps are measured (balanced.go).

import (
	"context"
	"errors"
	"time"

	"github.com/fencegate/fencegate/loadtest/stack"
)

// rollingRestartAt is when the rolling restart starts, as a share of the
// run: after the cold start, with time left for every step.
const rollingRestartAt = 4 // Duration / rollingRestartAt

// gatewayKillEntry is the gateway-kill scenario of the table.
func gatewayKillEntry() entry {
	return entry{name: "gateway-kill", proves: "the gateway child killed -9 and restarted loses no acknowledged batch",
		flags:    []string{"--gateway-child", "--kill-gateway-after"},
		on:       func(sc Scenario, _ *stack.Stack) bool { return sc.KillGatewayAfter > 0 },
		fault:    named("a gateway kill"),
		validate: validateKillGateway,
		needs: func(_ Scenario, s *stack.Stack) error {
			if len(s.Children()) == 0 {
				return errors.New("kill_gateway_after needs the gateway as a child process (--embedded --gateway-child)")
			}
			return nil
		},
		start: startKillGateway}
}

func validateKillGateway(s *Scenario) error {
	if s.KillGatewayAfter < 0 || s.KillGatewayAfter >= s.Duration && s.KillGatewayAfter != 0 {
		return errors.New("kill_gateway_after must be inside the duration")
	}
	return nil
}

// startKillGateway kills -9 the gateway child once, KillGatewayAfter into
// the phase, and restarts it.
func startKillGateway(r *runner, p *phase) error {
	p.after(p.ctx, r.sc.KillGatewayAfter, func() { r.stack.Children()[0].KillAndRestart(p.ctx) })
	return nil
}

// replicaFreezeEntry is the replica-freeze scenario of the table (FM25).
func replicaFreezeEntry() entry {
	return entry{name: "replica-freeze", proves: "a replica SIGSTOPped mid-batch past its TTL resumes to find its producers fenced; its leases move, nothing stale lands (FM25)",
		flags:    []string{"--freeze-replica-every", "--replica-pause"},
		on:       func(sc Scenario, _ *stack.Stack) bool { return sc.FreezeReplicaEvery > 0 },
		fault:    named("replica freezes"),
		replicas: 2, needs: needReplicas,
		validate: func(s *Scenario) error {
			if s.ReplicaPause == 0 {
				s.ReplicaPause = 3 * s.TTL
			}
			// Checked only when the fault is on: its default (3 x TTL) is
			// over a minute for TTLs of 20 s and more.
			if s.FreezeReplicaEvery > 0 && (s.ReplicaPause <= s.TTL || s.ReplicaPause > time.Minute) {
				return errors.New("replica_pause must be in (ttl, 1m]")
			}
			return nil
		},
		start: func(r *runner, p *phase) error {
			// Behind a balancer the freezes end before the run, as the
			// other replica faults do, so that every lease's re-serve gap
			// is measured.
			ctx := p.ctx
			if r.balanced() {
				ctx = p.faultCtx
			}
			r.every(ctx, p.faults, r.sc.FreezeReplicaEvery, func() { r.freezeReplica(ctx) })
			return nil
		}}
}

// replicaDrainEntry is the replica-drain scenario of the table.
func replicaDrainEntry() entry {
	return entry{name: "replica-drain", proves: "a replica drained by SIGTERM under load: its workers re-home with their tokens, every lease it held moves",
		flags:    []string{"--drain-replica-after"},
		on:       func(sc Scenario, _ *stack.Stack) bool { return sc.DrainReplicaAfter > 0 },
		fault:    named("a replica drain"),
		replicas: 2, needs: needReplicas, httpWorkers: true,
		validate: func(s *Scenario) error {
			if s.DrainReplicaAfter < 0 || s.DrainReplicaAfter >= s.Duration && s.DrainReplicaAfter != 0 {
				return errors.New("drain_replica_after must be inside the duration")
			}
			return nil
		},
		start: func(r *runner, p *phase) error {
			p.after(p.ctx, r.sc.DrainReplicaAfter, func() { r.drainReplica(p.ctx) })
			return nil
		}}
}

// replicaKillEntry is the replica-kill scenario of the table.
func replicaKillEntry() entry {
	return entry{name: "replica-kill", proves: "a replica killed -9 in turn and restarted on its port: every lease served again within its bound",
		flags:    []string{"--kill-replica-every"},
		on:       func(sc Scenario, _ *stack.Stack) bool { return sc.KillReplicaEvery > 0 },
		fault:    named("replica kills"),
		replicas: 2, needs: needReplicas,
		start: func(r *runner, p *phase) error {
			r.every(p.faultCtx, p.faults, r.sc.KillReplicaEvery, func() { r.killReplica(p.faultCtx) })
			return nil
		}}
}

// rollingRestartEntry is the rolling-restart scenario of the table.
func rollingRestartEntry() entry {
	return entry{name: "rolling-restart", proves: "every replica drained and restarted in turn under load: every lease served again within its bound",
		flags:    []string{"--rolling-restart"},
		on:       func(sc Scenario, _ *stack.Stack) bool { return sc.RollingRestart },
		fault:    named("a rolling restart"),
		replicas: 2, needs: needReplicas,
		start: func(r *runner, p *phase) error {
			p.faults.Add(1)
			go func() {
				defer p.faults.Done()
				wait(p.faultCtx, r.sc.Duration/rollingRestartAt)
				r.rollingRestart(p.faultCtx)
			}()
			return nil
		}}
}

// freezeReplica pauses the next replica in turn (FM25): its sessions stop
// mid-batch, their leases expire and move to the contenders on the other
// replica, and it resumes to find its producers fenced.
//
// The pause lasts ReplicaPause, and then until one of the leases held on
// the frozen replica has been taken over (at most ReplicaPause more): a
// handover slowed down by load must not turn the round into a plain
// pause that the local deadline alone refuses.
func (r *runner) freezeReplica(ctx context.Context) {
	r.bal.serial.Lock()
	defer r.bal.serial.Unlock()
	if ctx.Err() != nil {
		return
	}
	n := r.st.replicaFreezes.Add(1)
	i := int(n-1) % len(r.stack.Children())
	c := r.stack.Children()[i]
	held := r.heldOn(r.stack.GatewayURLs[i])
	stopped := func() {
		if r.balanced() {
			// Read once the replica is stopped: it grants nothing more.
			// The fault window may end meanwhile; the read must not.
			held = r.heldByReplica(context.WithoutCancel(ctx), c.Replica())
		}
		r.bal.struck(faultStop, c.Replica(), held)
	}
	c.Freeze(stopped, func() bool {
		for lease, token := range held {
			if r.st.latestGrant(lease) > token {
				return true
			}
		}
		return len(held) == 0
	}, r.sc.ReplicaPause)
	r.bal.resumed()
}

// drainReplica is the rolling-restart fault: SIGTERM to the first
// replica, its drain and exit timed, the time until every lease it held
// has a new generation elsewhere measured, and the replica started again.
func (r *runner) drainReplica(ctx context.Context) {
	held := r.heldOn(r.stack.GatewayURLs[0])
	start, errorsBefore := time.Now(), r.st.errors.Load()
	defer func() { r.st.drainErrors = r.st.errors.Load() - errorsBefore }()
	r.st.drainTook = r.stack.Children()[0].DrainAndRestart(ctx, time.Minute)
	for ctx.Err() == nil && time.Since(start) < time.Minute {
		moved := true
		for lease, token := range held {
			moved = moved && r.st.latestGrant(lease) > token
		}
		if moved {
			r.st.rehomeTook = time.Since(start)
			return
		}
		wait(ctx, 20*time.Millisecond)
	}
	r.st.rehomeTook = -1 // some lease never moved
}

// heldOn returns the leases (and tokens) that workers hold through the
// replica at url.
func (r *runner) heldOn(url string) map[string]int64 {
	held := map[string]int64{}
	for _, ws := range r.workers {
		for _, w := range ws {
			if w.owned.Load() && w.gw.Load().base == url {
				held[w.lease] = w.held.Load()
			}
		}
	}
	return held
}

// killReplica is the replica-kill fault: SIGKILL to the next replica in
// turn, started again at once on the same port under the same name.
func (r *runner) killReplica(ctx context.Context) {
	r.bal.serial.Lock()
	defer r.bal.serial.Unlock()
	if ctx.Err() != nil {
		return
	}
	n := r.bal.kills.Add(1)
	c := r.stack.Children()[int(n-1)%len(r.stack.Children())]
	start := time.Now()
	r.bal.struck(faultKill, c.Replica(), nil)
	c.KillAndRestart(ctx)
	r.backInRotation(ctx, c.Replica(), start)
}

// rollingRestart restarts every replica in turn: SIGTERM, its drain and
// exit, started again and ready (and back in the balancer's rotation),
// then the next. Once begun it restarts all of them, even past the end of
// the fault window (ctx): a rolling restart left half-way is another
// fault.
func (r *runner) rollingRestart(ctx context.Context) {
	r.bal.serial.Lock()
	defer r.bal.serial.Unlock()
	if ctx.Err() != nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	for _, c := range r.stack.Children() {
		start := time.Now()
		r.bal.struck(faultRestart, c.Replica(), nil)
		c.DrainAndRestart(ctx, time.Minute)
		r.backInRotation(ctx, c.Replica(), start)
	}
}

// backInRotation waits for the balancer to route to replica again and
// records the restart's length from start.
func (r *runner) backInRotation(ctx context.Context, replica string, start time.Time) {
	if r.balanced() {
		if err := r.stack.WaitInRotation(context.WithoutCancel(ctx), replica, 30*time.Second); err != nil {
			r.opts.Logger.Error("restarted replica", "error", err)
			return
		}
	}
	r.bal.restarted(time.Since(start))
}
