package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// Watch streams (docs/api.md, "Watching leases"; docs/design.md,
// "Revocation notices"): lease_events is the outbox, each replica's relay
// reads it by id when Postgres notifies it (one listening connection per
// replica) and hands each event to the streams that watch its name. A
// notice is never a safety signal: the fences hold without any, and a
// lost or late one costs only the time until the next renewal.

// EventSource is what the watch streams need of the lease store.
type EventSource interface {
	EventsAfter(ctx context.Context, after int64, limit int) (leasestore.EventRead, error)
	EventsRange(ctx context.Context, prefixes []string, after, upto int64, limit int) ([]leasestore.Event, error)
	LastEventID(ctx context.Context) (int64, uint64, error)
	SnapshotXmin(ctx context.Context) (uint64, error)
	Listen(ctx context.Context, notified func()) error
}

var _ EventSource = (*leasestore.Store)(nil)

// Defaults of WatchConfig.
const (
	// DefaultMaxStreams bounds the watch streams of a replica,
	// DefaultMaxStreamsPerClient those of one API client (429 beyond):
	// the SDK opens one per lease it holds.
	DefaultMaxStreams          = 10000
	DefaultMaxStreamsPerClient = 5000
	// DefaultHeartbeat is the time between heartbeat comments of an idle
	// stream: below the idle timeouts of common proxies (60s).
	DefaultHeartbeat = 15 * time.Second
	// DefaultWatchPoll is how often the relay reads the outbox without a
	// notification: the bound on a notice's delay while the listening
	// connection is down.
	DefaultWatchPoll = time.Second
	// DefaultStreamBuffer is how many events a stream may fall behind the
	// relay before it reads them from the outbox itself.
	DefaultStreamBuffer = 256
)

// WatchConfig of the watch streams. Zero fields take the defaults.
type WatchConfig struct {
	MaxStreams          int
	MaxStreamsPerClient int
	Heartbeat           time.Duration
	Poll                time.Duration
	Buffer              int
	// WriteTimeout bounds each write of a stream (an event, a heartbeat),
	// not the stream: a stream lives as long as its client reads, and a
	// client that stops reading is cut after WriteTimeout (default
	// ServerConfig's WriteTimeout default, 2m; serve passes
	// --write-timeout).
	WriteTimeout time.Duration
}

func (c *WatchConfig) fill() {
	c.MaxStreams = cmp.Or(c.MaxStreams, DefaultMaxStreams)
	c.MaxStreamsPerClient = cmp.Or(c.MaxStreamsPerClient, DefaultMaxStreamsPerClient)
	c.Heartbeat = cmp.Or(c.Heartbeat, DefaultHeartbeat)
	c.Poll = cmp.Or(c.Poll, DefaultWatchPoll)
	c.Buffer = cmp.Or(c.Buffer, DefaultStreamBuffer)
	if c.WriteTimeout == 0 {
		var sc ServerConfig
		sc.fill()
		c.WriteTimeout = sc.WriteTimeout
	}
}

// Watch turns on the watch streams (GET /v1/leases/{name}/events, GET
// /v1/events) on src's events and starts this replica's relay, which runs
// until ctx ends, and the gauge of open streams. Without it the streams
// answer not_found.
func (s *Server) Watch(ctx context.Context, src EventSource, cfg WatchConfig) error {
	cfg.fill()
	m := s.g.cfg.MeterProvider.Meter("github.com/fencegate/fencegate/gateway")
	if _, err := m.Int64ObservableGauge("fencegate.watch.streams", metric.WithUnit("{stream}"),
		metric.WithDescription("Watch streams open on this replica (GET /v1/leases/{name}/events and GET /v1/events)."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(s.WatchStreams()))
			return nil
		})); err != nil {
		return err
	}
	r := newRelay(src, cfg, s.log)
	s.watch.Store(r)
	go r.run(ctx)
	return nil
}

// DrainStreams ends every watch stream of this replica, cleanly (each
// response ends; the client resumes elsewhere with Last-Event-ID), and
// refuses new ones (draining). It returns how many it ended.
func (s *Server) DrainStreams() int {
	if r := s.watch.Load(); r != nil {
		return r.drain()
	}
	return 0
}

// WatchStreams returns the number of watch streams open on this replica.
func (s *Server) WatchStreams() int {
	r := s.watch.Load()
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// WatchEvent is the data of one event of a watch stream.
type WatchEvent struct {
	ID      int64  `json:"id"`
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	OwnerID string `json:"owner_id"`
	// Token is left out for a client that may not act for the
	// generation's client (FM38), as in the lease view.
	Token         int64     `json:"token,omitempty"`
	Holder        string    `json:"holder"`
	ProducerID    int64     `json:"producer_id"`
	ProducerEpoch int16     `json:"producer_epoch"`
	ExpiresAt     time.Time `json:"expires_at"`
	At            time.Time `json:"at"`
}

func watchEventOf(e leasestore.Event, cl *Client) WatchEvent {
	w := WatchEvent{ID: e.ID, Name: e.Name, Kind: e.Kind, OwnerID: e.OwnerID, Holder: e.Holder,
		ProducerID: e.ProducerID, ProducerEpoch: e.ProducerEpoch, ExpiresAt: e.ExpiresAt, At: e.At}
	if cl.actsFor(e.Client) {
		w.Token = e.Token
	}
	return w
}

// watchLease serves GET /v1/leases/{name}/events.
func (s *Server) watchLease(c echo.Context) error {
	name, err := leaseParam(c)
	if err != nil {
		return err
	}
	return s.stream(c, name, name)
}

// watchPrefix serves GET /v1/events?prefix=: the events of every lease
// under prefix that the client may take (the others are left out, as in
// a listing).
func (s *Server) watchPrefix(c echo.Context) error {
	prefix := c.QueryParam("prefix")
	if err := leasestore.CheckListArgs(prefix, ""); err != nil {
		return errorf(CodeInvalidRequest, "%v", err)
	}
	return s.stream(c, "", prefix)
}

// stream serves one watch stream of name (exact) or prefix.
func (s *Server) stream(c echo.Context, name, prefix string) error {
	r := s.watch.Load()
	if r == nil {
		return errorf(CodeNotFound, "watch streams are not served by this replica")
	}
	if s.g.draining.Load() {
		return errDraining()
	}
	last, lerr := lastEventID(c.Request().Header.Get("Last-Event-ID"))
	if lerr != nil {
		return lerr
	}
	if err := r.waitReady(c.Request().Context()); err != nil {
		return err
	}
	cl := client(c)
	done, aerr := r.admit(cl.Name)
	if aerr != nil {
		return aerr
	}
	defer done()
	w := &sseWriter{c: c, rc: http.NewResponseController(c.Response().Writer), timeout: r.cfg.WriteTimeout}
	st := &watchStream{r: r, w: w, cl: cl, name: name, prefix: prefix, last: last}
	return st.serve(c.Request().Context())
}

// lastEventID reads the Last-Event-ID header: -1 when absent (start at
// the relay's cursor).
func lastEventID(v string) (int64, *Error) {
	if v == "" {
		return -1, nil
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 0 {
		return 0, errorf(CodeInvalidRequest, "Last-Event-ID must be an event id (a non-negative integer), got %q", v)
	}
	return id, nil
}

// watchStream is one stream's state: the last event id it sent.
type watchStream struct {
	r            *relay
	w            *sseWriter
	cl           *Client
	name, prefix string
	last         int64
}

// errStreamDrained ends a stream on drain.
var errStreamDrained = errors.New("drained")

func (st *watchStream) serve(ctx context.Context) error {
	// Subscribed before the first byte: a client that saw the stream open
	// misses no event after it.
	sb, upto := st.r.subscribe(st.name, st.prefix)
	defer func() { st.r.unsubscribe(sb) }()
	if err := st.w.open(); err != nil {
		return nil
	}
	beat := time.NewTicker(st.r.cfg.Heartbeat)
	defer beat.Stop()
	for {
		if err := st.catchUp(ctx, upto); err != nil {
			return st.end(err)
		}
		if err := st.follow(ctx, sb, beat.C); err != nil {
			return st.end(err)
		}
		// lagged: subscribe again and read what was missed from the
		// outbox, then follow again.
		st.r.unsubscribe(sb)
		sb, upto = st.r.subscribe(st.name, st.prefix)
	}
}

// end is the stream's end: a drain says so in a comment; a client gone or
// a write cut by the timeout has nobody to tell.
func (st *watchStream) end(err error) error {
	if errors.Is(err, errStreamDrained) {
		_ = st.w.comment("draining")
	}
	return nil
}

// catchUp sends the events of the outbox between the stream's last event
// and upto, the relay's cursor when the stream subscribed: together with
// those queued for the subscription, every event after last, once.
func (st *watchStream) catchUp(ctx context.Context, upto int64) error {
	if st.last < 0 {
		st.last = upto
	}
	prefixes := st.visible()
	for st.last < upto {
		evs, err := st.r.src.EventsRange(ctx, prefixes, st.last, upto, relayBatch)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if err := st.send(e); err != nil {
				return err
			}
		}
		if len(evs) < relayBatch {
			st.last = upto
		}
	}
	return nil
}

// visible are the name prefixes a catch-up reads: the stream's lease, or
// the parts of its prefix the client's allow patterns reach (FM91).
func (st *watchStream) visible() []string {
	if st.name != "" {
		return []string{st.name}
	}
	return visiblePrefixes(st.prefix, st.cl.Allow)
}

// visiblePrefixes narrows prefix to the names allow patterns may match:
// each pattern's literal prefix that prefix starts, or prefix itself
// where a literal prefix is a prefix of it, without a prefix another
// covers. Every name under prefix that a pattern matches is under one of
// them (txnmap.LiteralPrefix), so the catch-up reads no other tenant's
// events; send still decides each event.
func visiblePrefixes(prefix string, allow []string) []string {
	var out []string
	for _, a := range allow {
		lp := txnmap.LiteralPrefix(a)
		switch {
		case strings.HasPrefix(prefix, lp):
			out = append(out, prefix)
		case strings.HasPrefix(lp, prefix):
			out = append(out, lp)
		}
	}
	slices.Sort(out)
	var kept []string
	for _, p := range out {
		if len(kept) == 0 || !strings.HasPrefix(p, kept[len(kept)-1]) {
			kept = append(kept, p)
		}
	}
	return kept
}

// follow sends sb's events and heartbeats until the client goes, a write
// fails, the drain, or sb lagged (nil).
func (st *watchStream) follow(ctx context.Context, sb *sub, beat <-chan time.Time) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sb.closed:
			return errStreamDrained
		case e := <-sb.events:
			if err := st.send(*e); err != nil {
				return err
			}
		case <-sb.lagged:
			// Send what is queued; the outbox has the rest.
			for {
				select {
				case e := <-sb.events:
					if err := st.send(*e); err != nil {
						return err
					}
					continue
				default:
				}
				return nil
			}
		case <-beat:
			if err := st.w.comment("heartbeat"); err != nil {
				return err
			}
		}
	}
}

// send writes e if the stream has not sent it and the client may see it.
func (st *watchStream) send(e leasestore.Event) error {
	if e.ID <= st.last {
		return nil
	}
	st.last = e.ID
	if (st.name != "" && e.Name != st.name) || st.cl.authorize(e.Name) != nil {
		return nil
	}
	return st.w.event(e.ID, e.Kind, watchEventOf(e, st.cl))
}

// sseWriter writes Server-Sent Events, each flushed at once and bounded
// by its own write deadline instead of the server's WriteTimeout.
type sseWriter struct {
	c       echo.Context
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *sseWriter) open() error {
	h := w.c.Response().Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set(echo.HeaderCacheControl, "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies: pass each event on at once
	w.c.Response().WriteHeader(http.StatusOK)
	return w.write(": watching\n\n")
}

func (w *sseWriter) event(id int64, kind string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return w.write(fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", id, kind, b))
}

func (w *sseWriter) comment(text string) error { return w.write(": " + text + "\n\n") }

func (w *sseWriter) write(s string) error {
	if err := w.rc.SetWriteDeadline(time.Now().Add(w.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := w.c.Response().Write([]byte(s)); err != nil {
		return err
	}
	return w.rc.Flush()
}
