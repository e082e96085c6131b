package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
)

// TestRunCancelsTheStepOnLoss: the step's context ends the moment the
// lease is lost (here a renewal answered lease_lost), with the loss as
// its cause, and Run starts over with the next generation.
func TestRunCancelsTheStepOnLoss(t *testing.T) {
	t.Parallel()
	base := gatewayURL(map[string][]string{kRenew: {"lease_lost_not_owner"}})
	c, err := client.New(client.Config{BaseURL: base, Token: "t", Owner: "w1", TTL: time.Second, RenewEvery: 50 * time.Millisecond,
		DisableWatch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tokens []int64
	err = c.Run(ctx, "shard:1", func(ctx context.Context, run *client.Run) error {
		tokens = append(tokens, run.Lease.Grant().Token)
		if len(tokens) > 1 {
			return nil
		}
		<-ctx.Done() // a long step: the loss ends it
		if !errors.Is(context.Cause(ctx), client.ErrLeaseLost) {
			t.Errorf("the step's context ended with %v, want the loss", context.Cause(ctx))
		}
		return ctx.Err()
	})
	if err != nil || len(tokens) != 2 || tokens[1] <= tokens[0] {
		t.Fatalf("Run: %v after generations %v, want nil after two, the second later", err, tokens)
	}
}

// TestRunReturnsTheStepsOwnError: an error of the step that is not a loss
// ends Run: the lease is released and the error returned as is.
func TestRunReturnsTheStepsOwnError(t *testing.T) {
	t.Parallel()
	c, err := client.New(client.Config{BaseURL: gatewayURL(nil), Token: "t", Owner: "w1", DisableWatch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	bad := errors.New("input corrupt")
	var lease *client.Lease
	err = c.Run(context.Background(), "shard:1", func(_ context.Context, run *client.Run) error {
		lease = run.Lease
		return bad
	})
	if err != bad || !errors.Is(lease.Err(), client.ErrReleased) {
		t.Fatalf("Run: %v, lease %v; want the step's error and the lease released", err, lease.Err())
	}
}
