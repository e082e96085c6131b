package loadtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestRenewalDoesNotWaitForABatchConnection: with every batch connection
// of a client busy (the cap is 1 here and a batch is held in the server), a
// renewal is still answered at once, so the renewal latency the harness
// reports is the gateway's, not its own connection queue. It fails when
// lease calls and batches share one capped pool.
func TestRenewalDoesNotWaitForABatchConnection(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			close(entered)
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	c := newClient(srv.URL, "", 1)
	ctx := context.Background()

	batch := make(chan reply, 1)
	go func() { batch <- c.send(ctx, "POST", "/v1/leases/shard:1/records", "application/json", []byte(`{}`)) }()
	<-entered
	renewed := make(chan reply, 1)
	go func() { renewed <- c.do(ctx, "PATCH", "/v1/leases/shard:1", []byte(`{}`)) }()
	var rep reply
	select {
	case rep = <-renewed:
	case <-time.After(10 * time.Second):
		t.Error("the renewal waited for the batch's connection")
		close(release)
		rep = <-renewed
	}
	if rep.status != http.StatusOK {
		t.Errorf("renewal answered %d %q %s", rep.status, rep.problem.Code, rep.transport)
	}
	select {
	case <-release:
	default:
		close(release)
	}
	if rep := <-batch; rep.status != http.StatusOK {
		t.Errorf("batch answered %d %q %s", rep.status, rep.problem.Code, rep.transport)
	}
}
