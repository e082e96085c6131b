package gateway

// Hook names a pause point in the handover and produce paths. Tests use
// them to drive exact interleavings (FM01, FM02, FM06) without sleeps.
type Hook string

const (
	// HookGranted: the Postgres grant exists, no producer yet (handover
	// step 1 done).
	HookGranted Hook = "granted"
	// HookConnected: the producer reached the cluster (metadata), the
	// epoch bump not yet asked for.
	HookConnected Hook = "connected"
	// HookInitialized: InitTransactions returned (the epoch is bumped),
	// the barrier is not yet written.
	HookInitialized Hook = "initialized"
	// HookBarrierSent: the barrier record is delivered to its open
	// transaction, the commit not yet asked for.
	HookBarrierSent Hook = "barrier_sent"
	// HookBeforeActivate: the barrier is committed, Activate not yet run.
	HookBeforeActivate Hook = "before_activate"
	// HookAdmitted: a produce passed the session check, no transaction yet.
	HookAdmitted Hook = "admitted"
	// HookBeforeCommit: a batch's records are delivered to the open
	// transaction, CommitTransaction not yet called.
	HookBeforeCommit Hook = "before_commit"
	// HookCommitReturned: CommitTransaction returned (with or without an
	// error), the batch's answer not yet decided.
	HookCommitReturned Hook = "commit_returned"
	// HookLedgerBehind: a checkpoint read found the ledger behind the
	// caller's barrier and is about to wait for it.
	HookLedgerBehind Hook = "ledger_behind"
)

// Hooks calls Fn at every named point; nil does nothing. Fn may block to
// pause the path. It must be safe for concurrent use.
type Hooks struct {
	Fn func(h Hook, lease string, token int64)
}

func (h Hooks) call(hook Hook, lease string, token int64) {
	if h.Fn != nil {
		h.Fn(hook, lease, token)
	}
}
