package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"sync"
	"time"

	"github.com/fencegate/fencegate/client"
)

// gatewayURL starts a stand-in for a gateway (fake_test.go: it answers as
// one lease of the real gateway would, plus the recorded replies an
// example scripts) and returns its address. A worker passes its load
// balancer's address instead, e.g. "http://fencegate:8080".
func gatewayURL(script map[string][]string) string {
	f := newFakeGateway(nil)
	for kind, replies := range script {
		f.answer(kind, replies...)
	}
	return f.srv.URL
}

// The loop every worker writes: wait for the lease (AcquireWait), work
// while it holds (until Lost), and when it is lost back off and wait for
// it again. Batch ids come from the input, so the batch that the loss cut
// off is sent again under the same id and the ledger keeps it once.
//
// Here the gateway answers the third batch lease_lost, as when another
// worker took the lease over; the lease comes back at the next grant.
func Example() {
	base := gatewayURL(map[string][]string{kProduce: {"", "", "lease_lost_not_owner"}})

	ctx := context.Background() // a worker's own: signal.NotifyContext(ctx, syscall.SIGTERM)
	c, err := client.New(client.Config{
		BaseURL: base, // e.g. "http://fencegate:8080"
		Token:   "worker-token",
		Owner:   "indexer-17", // stable across restarts: batch ids are scoped to it
	})
	if err != nil {
		log.Fatal(err) // a Config that could never work
	}
	docs := []string{"a", "b", "c", "d"} // the worker's input, in order
	next := 0                            // docs[:next] are committed
	for losses := 0; next < len(docs); {
		lease, err := c.AcquireWait(ctx, "shard:42")
		if err != nil {
			log.Fatal(err) // ctx ended, or a refusal to fix (unauthorized, ...)
		}
		for err == nil && next < len(docs) {
			select {
			case <-lease.Lost(): // a long step between batches selects on it too
				err = lease.Err()
			default:
				batchID := "doc-" + docs[next] // from the input: a retry reuses it
				var res client.Result
				res, err = lease.Produce(ctx, batchID, []client.Record{{Key: []byte(docs[next]), Value: []byte("payload")}})
				if err == nil {
					fmt.Printf("%s committed under token %d\n", batchID, res.Token)
					next++
				}
			}
		}
		if err == nil {
			break // all done; Close releases the lease
		}
		if !errors.Is(err, client.ErrLeaseLost) {
			log.Fatal(err) // a refusal to fix (payload_too_large, ...), or ctx ended
		}
		losses++
		fmt.Printf("lease lost (%s): backing off, then waiting for it again\n", client.ErrorCode(err))
		select {
		case <-time.After(client.Backoff(losses, 100*time.Millisecond, 10*time.Second, 0)):
		case <-ctx.Done():
			return
		}
	}
	// Close releases the leases still held; bound it: the gateway may be gone.
	closing, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(closing); err != nil {
		log.Print(err) // not released: the lease expires after its TTL
	}
	// Output:
	// doc-a committed under token 1
	// doc-b committed under token 1
	// lease lost (lease_lost): backing off, then waiting for it again
	// doc-c committed under token 2
	// doc-d committed under token 2
}

// A worker that keeps its place in the lease's checkpoint: each batch
// carries the position after it (WithCheckpoint), committed with the
// batch; whoever acquires the lease next, this worker or another, reads it
// (Checkpoint) and goes on from there. On a loss the worker starts over:
// acquire, read the checkpoint, process from there.
//
// Here the second batch lands but its answer is lost, and the retry finds
// the lease lost (another worker took it over): Produce cannot tell
// whether doc-b is committed. The checkpoint read after the next acquire
// can: the ledger has applied everything of the older generation by then.
func Example_checkpoint() {
	base := gatewayURL(map[string][]string{kProduce: {"", landedThenTransport, "lease_lost_not_owner"}})

	ctx := context.Background() // a worker's own: signal.NotifyContext(ctx, syscall.SIGTERM)
	c, err := client.New(client.Config{BaseURL: base, Token: "worker-token", Owner: "indexer-17"})
	if err != nil {
		log.Fatal(err) // a Config that could never work
	}
	defer c.Close(context.Background())  // a worker bounds it: the gateway may be gone
	docs := []string{"a", "b", "c", "d"} // the worker's input, in order
	uncertain := ""                      // a batch whose outcome Produce could not tell
	for losses := 0; ; {
		lease, err := c.AcquireWait(ctx, "shard:42")
		if err != nil {
			log.Fatal(err) // ctx ended, or a refusal to fix (unauthorized, ...)
		}
		cp, err := lease.Checkpoint(ctx) // waits for the ledger to catch up with this generation
		next := 0                        // docs[:next] are committed
		if err == nil {
			if cp != nil {
				next, _ = strconv.Atoi(string(cp.Value)) // where the last checkpointed batch left off
			}
			if uncertain != "" {
				fmt.Printf("%s committed: %v\n", uncertain, cp.Committed(uncertain))
				uncertain = ""
			}
			fmt.Printf("token %d: starting at doc %d\n", lease.Grant().Token, next)
		}
		for err == nil && next < len(docs) {
			select {
			case <-lease.Lost(): // a long step between batches selects on it too
				err = lease.Err()
			default:
				batchID := "doc-" + docs[next]
				after := []byte(strconv.Itoa(next + 1)) // where the work goes on once this batch is in
				var res client.Result
				res, err = lease.Produce(ctx, batchID, []client.Record{{Key: []byte(docs[next]), Value: []byte("payload")}},
					client.WithCheckpoint(after))
				if errors.Is(err, client.ErrOutcomeUnknown) {
					uncertain = batchID // the checkpoint will tell
				}
				if err == nil {
					fmt.Printf("%s committed under token %d\n", batchID, res.Token)
					next++
				}
			}
		}
		if err == nil {
			return // all done; Close releases the lease
		}
		if !errors.Is(err, client.ErrLeaseLost) {
			log.Fatal(err) // a refusal to fix (payload_too_large, ...), or ctx ended
		}
		losses++
		fmt.Printf("lease lost (%s): starting over\n", client.ErrorCode(err))
		select {
		case <-time.After(client.Backoff(losses, 100*time.Millisecond, 10*time.Second, 0)):
		case <-ctx.Done():
			return
		}
	}
	// Output:
	// token 1: starting at doc 0
	// doc-a committed under token 1
	// lease lost (lease_lost): starting over
	// doc-b committed: true
	// token 2: starting at doc 2
	// doc-c committed under token 2
	// doc-d committed under token 2
}

// A commit whose outcome is unknown (409 generation_ended: the broker did
// not answer the commit in time) is retried by Produce under a new
// generation, with the same batch id; the ledger keeps the batch once.
func ExampleLease_Produce_ambiguousCommit() {
	base := gatewayURL(map[string][]string{kProduce: {"generation_ended"}})
	c, _ := client.New(client.Config{BaseURL: base, Token: "worker-token", Owner: "indexer-17"})
	ctx := context.Background()
	lease, err := c.Acquire(ctx, "shard:42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	first := lease.Grant().Token

	res, err := lease.Produce(ctx, "doc-0", []client.Record{{Value: []byte("payload")}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sent under token %d, committed under token %d (the lease's token is now %d)\n", first, res.Token, lease.Grant().Token)
	// Output:
	// sent under token 1, committed under token 2 (the lease's token is now 2)
}

// AcquireWait waits while another owner holds the lease (409 lease_held),
// until it is granted or the context ends.
func ExampleClient_AcquireWait() {
	base := gatewayURL(map[string][]string{kAcquire: {"lease_held", "lease_held"}})
	c, _ := client.New(client.Config{BaseURL: base, Token: "worker-token", Owner: "indexer-17"})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := c.AcquireWait(ctx, "shard:42")
	if err != nil {
		// After ctx ends, err matches ctx.Err() and the last answer:
		// client.ErrorCode(err) == client.CodeLeaseHeld.
		log.Fatal(err)
	}
	defer lease.Release(context.Background())
	fmt.Println("granted token", lease.Grant().Token)
	// Output:
	// granted token 1
}

// Switch on the code of an error reply, never on its detail.
func ExampleErrorCode() {
	base := gatewayURL(map[string][]string{kAcquire: {"lease_held"}})
	c, _ := client.New(client.Config{BaseURL: base, Token: "worker-token", Owner: "indexer-04"})

	_, err := c.Acquire(context.Background(), "shard:100")
	switch client.ErrorCode(err) {
	case client.CodeLeaseHeld:
		var p *client.Problem
		errors.As(err, &p)
		fmt.Printf("held by %s until its expiry\n", p.HolderOwnerID)
	case "":
		fmt.Println("no answer from the gateway:", err)
	default:
		fmt.Println("refused:", err)
	}
	// Output:
	// held by w1 until its expiry
}

// Lost is closed once the lease can no longer write; Err says why.
func ExampleLease_Lost() {
	base := gatewayURL(map[string][]string{kRenew: {"lease_lost_not_owner"}})
	c, _ := client.New(client.Config{BaseURL: base, Token: "worker-token", Owner: "indexer-17",
		TTL: time.Second, RenewEvery: 100 * time.Millisecond})
	lease, err := c.Acquire(context.Background(), "shard:100")
	if err != nil {
		log.Fatal(err)
	}

	<-lease.Lost() // a worker selects on it next to its work
	var p *client.Problem
	switch err := lease.Err(); {
	case errors.As(err, &p):
		fmt.Printf("lost: %s (%s)\n", p.Code, p.Reason)
	case errors.Is(err, client.ErrDeadlinePassed):
		fmt.Println("lost: no renewal got through before the local deadline")
	}
	_, err = lease.Produce(context.Background(), "doc-9", []client.Record{{Value: []byte("late")}})
	fmt.Println(errors.Is(err, client.ErrLeaseLost))
	// Output:
	// lost: lease_lost (not_owner)
	// true
}

// produceStats is a ProducedHook that counts Produce calls by outcome, as
// a worker's metrics would.
type produceStats struct {
	mu sync.Mutex
	n  map[client.Outcome]int
}

func (s *produceStats) OnProduced(_ *client.Lease, _ string, outcome client.Outcome, _ time.Duration, _ error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n[outcome]++
}

// Hooks see every lease's life: here Produce's outcomes. Config.Logger
// (a *slog.Logger) gets the same points as log records.
func ExampleHook() {
	base := gatewayURL(map[string][]string{kProduce: {"", "payload_too_large"}})
	stats := &produceStats{n: map[client.Outcome]int{}}
	c, err := client.New(client.Config{BaseURL: base, Token: "worker-token", Owner: "indexer-17",
		Hooks: []client.Hook{stats}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	lease, err := c.Acquire(context.Background(), "shard:42")
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"doc-0", "doc-1"} {
		_, _ = lease.Produce(context.Background(), id, []client.Record{{Value: []byte("payload")}})
	}
	fmt.Println(client.OutcomeCommitted, stats.n[client.OutcomeCommitted])
	fmt.Println(client.OutcomeRefused, stats.n[client.OutcomeRefused])
	// Output:
	// committed 1
	// definite refusal 1
}

// Run writes the worker's loop once: the step gets where to resume and a
// context cancelled on loss, and does only its own work. Here, as in the
// checkpoint Example, the second batch lands but its answer is lost and
// the retry finds the lease lost: Run starts over, and the next
// generation's checkpoint settles the batch and says where to go on.
func ExampleClient_Run() {
	base := gatewayURL(map[string][]string{kProduce: {"", landedThenTransport, "lease_lost_not_owner"}})
	c, err := client.New(client.Config{BaseURL: base, Token: "worker-token", Owner: "indexer-17"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	docs := []string{"a", "b", "c", "d"}
	err = c.Run(context.Background(), "shard:42", func(ctx context.Context, run *client.Run) error {
		next, _ := strconv.Atoi(string(run.Resume())) // nil: 0, from the start
		fmt.Printf("token %d: starting at doc %d %v\n", run.Lease.Grant().Token, next, run.Settled)
		for ; next < len(docs); next++ {
			_, err := run.Produce(ctx, "doc-"+docs[next], []client.Record{{Value: []byte("payload")}},
				client.WithCheckpoint([]byte(strconv.Itoa(next+1))))
			if err != nil {
				return err // a loss: Run starts over from the checkpoint
			}
		}
		return nil // done: Run releases the lease
	})
	fmt.Println("done:", err)
	// Output:
	// token 1: starting at doc 0 map[]
	// token 2: starting at doc 2 map[doc-b:true]
	// done: <nil>
}
