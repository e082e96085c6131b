package gateway

import (
	"context"
	"slices"
	"sync"
)

// handoverSlots shares the handover slots between API clients. A freed
// slot goes to the clients with waiting acquires in turn, oldest waiter
// first within a client, so one client's flood delays another client's
// acquire by about one handover per client ahead of it, never by the
// flood's length. The queue is shared too: when it is full, an acquire of
// a client with fewer waiters than the client with the most takes the
// place of that client's newest waiter, which is refused 429 (nothing was
// granted), so a single client may still use the whole queue (FM47).
type handoverSlots struct {
	mu    sync.Mutex
	free  int
	queue int
	n     int // acquires waiting
	wait  map[string][]chan error
	turn  []string // clients with waiters, in turn order
}

func newHandoverSlots(slots, queue int) *handoverSlots {
	return &handoverSlots{free: slots, queue: queue, wait: map[string][]chan error{}}
}

// take waits for a slot for client until ctx ends; it returns a 429 *Error
// when the queue has no room for client or ctx ends first.
func (h *handoverSlots) take(ctx context.Context, client string) error {
	h.mu.Lock()
	if h.free > 0 && h.n == 0 {
		h.free--
		h.mu.Unlock()
		return nil
	}
	if h.n >= h.queue && !h.pushOut(client) {
		h.mu.Unlock()
		return errorf(CodeTooManyRequests, "%d acquires wait for a handover slot, the most allowed; retry later", h.queue)
	}
	done := make(chan error, 1)
	h.enqueue(client, done)
	h.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	h.mu.Lock()
	removed := h.remove(client, done)
	h.mu.Unlock()
	if !removed {
		return <-done // granted or refused meanwhile
	}
	return errorf(CodeTooManyRequests, "no handover slot within the wait allowed; retry later")
}

// release gives the slot to the next client in turn, or frees it. The
// client served goes to the end of the turn order.
func (h *handoverSlots) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		h.free++
		return
	}
	client := h.turn[0]
	h.turn = append(h.turn[1:], client)
	next := h.wait[client][0]
	h.drop(client, 0)
	next <- nil
}

// pushOut refuses the newest waiter of the client with the most waiters
// when that is at least two more than client has (h.mu held).
func (h *handoverSlots) pushOut(client string) bool {
	most := ""
	for c, q := range h.wait {
		if most == "" || len(q) > len(h.wait[most]) {
			most = c
		}
	}
	q := h.wait[most]
	if len(q) < len(h.wait[client])+2 {
		return false
	}
	newest := q[len(q)-1]
	h.drop(most, len(q)-1)
	newest <- errorf(CodeTooManyRequests, "the handover queue is full and shared: this acquire made room for another client's; retry later")
	return true
}

// enqueue adds a waiter of client (h.mu held).
func (h *handoverSlots) enqueue(client string, done chan error) {
	if len(h.wait[client]) == 0 {
		h.turn = append(h.turn, client)
	}
	h.wait[client] = append(h.wait[client], done)
	h.n++
}

// drop takes client's waiter i out of the queue; a client left without
// waiters leaves the turn order (h.mu held).
func (h *handoverSlots) drop(client string, i int) {
	h.n--
	q := slices.Delete(h.wait[client], i, i+1)
	if len(q) > 0 {
		h.wait[client] = q
		return
	}
	delete(h.wait, client)
	h.turn = slices.DeleteFunc(h.turn, func(c string) bool { return c == client })
}

// remove takes done out of the queue after its wait ended; false when it
// was no longer there (granted or refused meanwhile) (h.mu held).
func (h *handoverSlots) remove(client string, done chan error) bool {
	i := slices.Index(h.wait[client], done)
	if i < 0 {
		return false
	}
	h.drop(client, i)
	return true
}

func (h *handoverSlots) waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}
