package gateway

import (
	"bytes"
	"testing"
)

// TestLentBodyBufferHoldsItsCapacity: a batch-sized body is read into a
// pooled buffer only when the body budget has that buffer's whole
// capacity (the budget bounds memory, not declared lengths), and release
// gives the capacity back. Without the grow in lend, a flood of 64 KiB
// bodies would each hold 256 KiB of memory against 64 KiB of budget.
func TestLentBodyBufferHoldsItsCapacity(t *testing.T) {
	l := newLimiter(ServerConfig{MaxBodyBytesInFlight: 2 * pooledBody})
	a, b, c := &bodyHold{l: l}, &bodyHold{l: l}, &bodyHold{l: l}
	if a.lend(100<<10) == nil || b.lend(100<<10) == nil {
		t.Fatal("two bodies within a budget of two pooled buffers were lent none")
	}
	if got := l.bodyBytes; got != 2*pooledBody {
		t.Fatalf("budget taken by two lent buffers: %d bytes, want %d", got, 2*pooledBody)
	}
	if c.lend(100<<10) != nil {
		t.Fatal("a third buffer was lent beyond the budget")
	}
	a.release()
	b.release()
	c.release()
	if l.bodyBytes != 0 {
		t.Fatalf("budget after release: %d bytes, want 0", l.bodyBytes)
	}
}

// TestSmallAndLargeBodiesAreNotPooled: acquires, renewals and small
// batches allocate their own (cheap) buffer, and a body larger than a
// pooled buffer grows its own; neither takes a pooled buffer's budget.
func TestSmallAndLargeBodiesAreNotPooled(t *testing.T) {
	l := newLimiter(ServerConfig{})
	for _, n := range []int64{0, 512, minPooledBody - 1, pooledBody, 1 << 20} {
		h := &bodyHold{l: l}
		if h.lend(n) != nil || h.lent != nil || l.bodyBytes != 0 {
			t.Fatalf("declared %d bytes: lent a pooled buffer (budget %d)", n, l.bodyBytes)
		}
	}
}

// TestReadBodyIntoTheLentBuffer: readBody reads a body of the declared
// length into the lent buffer, without a copy, and allocates when the
// lent buffer is too small for its first read.
func TestReadBodyIntoTheLentBuffer(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 100<<10)
	lent := make([]byte, 0, pooledBody)
	got, err := readBody(bytes.NewReader(body), int64(len(body)), 1<<20, func(int) bool { return true }, lent)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("readBody: %v, %d bytes", err, len(got))
	}
	if &got[0] != &lent[:1][0] {
		t.Fatal("the body was not read into the lent buffer")
	}
	small := make([]byte, 0, 10)
	got, err = readBody(bytes.NewReader(body), int64(len(body)), 1<<20, func(int) bool { return true }, small)
	if err != nil || !bytes.Equal(got, body) || &got[0] == &small[:1][0] {
		t.Fatalf("a lent buffer too small: %v, %d bytes, read into it: %v", err, len(got), err == nil && &got[0] == &small[:1][0])
	}
}

// TestForwardedBodyIsNotPutBack: a kept buffer (a forwarded body, which the
// HTTP client may still read after the answer) is not given to the pool
// on release, while its budget is given back.
func TestForwardedBodyIsNotPutBack(t *testing.T) {
	l := newLimiter(ServerConfig{})
	h := &bodyHold{l: l}
	buf := h.lend(100 << 10)
	buf = append(buf, "forwarded"...)
	h.keep()
	h.release()
	for range 100 {
		p := bodyPool.Get().(*[]byte)
		if cap(*p) > 0 && &(*p)[:1][0] == &buf[0] {
			t.Fatal("a kept buffer went back to the pool")
		}
	}
	if l.bodyBytes != 0 {
		t.Fatalf("budget after release: %d bytes, want 0", l.bodyBytes)
	}
}
