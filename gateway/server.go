package gateway

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencegate/fencegate/internal/probe"
	"github.com/fencegate/fencegate/leasestore"
)

// Server is the v1 HTTP API (docs/api.md) over a Gateway.
type Server struct {
	g     *Gateway
	auth  *Authenticator
	e     *echo.Echo
	log   *slog.Logger
	limit *limiter
	// routes are the templates of the registered routes: the only
	// http.route label values (FM41).
	routes map[string]bool
	// served are the registered method and template pairs ("GET
	// /healthz"): what the Allow header of a 405 lists.
	served map[string]bool
	// ready answers /readyz from a cached check (FM43).
	ready *probe.Cache
	// fwd forwards requests to other replicas (nil: off; Forward).
	fwd *forwarder
	// watch relays lease events to the watch streams (nil: off; Watch).
	watch atomic.Pointer[relay]
}

const (
	clientKey = "fencegate.client"
	// bodyReadKey marks a request whose body the handler started reading.
	bodyReadKey = "fencegate.body-read"
	// bodyHoldKey is the request's share of the body budget.
	bodyHoldKey = "fencegate.body-hold"
)

// NewServer builds the HTTP handler.
func NewServer(g *Gateway, auth *Authenticator) *Server {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	s := &Server{g: g, auth: auth, e: e, log: g.log, limit: newLimiter(ServerConfig{}), routes: map[string]bool{}, served: map[string]bool{}}
	s.ready = probe.New(g.Ready, probe.Config{})
	e.HTTPErrorHandler = s.handleError
	// A panic in a handler answers 500 problem+json and harms no session:
	// every session state change happens under its own locks.
	e.Use(middleware.Recover(), s.measure)
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	// The total cap comes before authentication so that a flood of
	// requests with bad tokens cannot starve good ones of CPU either; the
	// per-client cap after it, by the authenticated name.
	v1 := e.Group("/v1", s.limitTotal, s.authenticate, s.limitClient, s.holdBody)
	v1.POST("/leases", s.acquire)
	v1.GET("/leases", s.list)
	v1.GET("/leases/:name", s.get)
	v1.PATCH("/leases/:name", s.renew)
	v1.DELETE("/leases/:name", s.release)
	v1.POST("/leases/:name/records", s.produce)
	v1.GET("/leases/:name/checkpoint", s.checkpoint)
	// Watch streams live long: they hold a stream slot (watch.go), not an
	// in-flight one, and read no body.
	e.GET("/v1/leases/:name/events", s.watchLease, s.authenticate)
	e.GET("/v1/events", s.watchPrefix, s.authenticate)
	// The group's catch-all (echo's, for its middleware to run on every
	// /v1 path) would answer 404 for a wrong method too.
	v1.RouteNotFound("", s.noRoute)
	v1.RouteNotFound("/*", s.noRoute)
	for _, r := range e.Routes() {
		s.routes[r.Path] = true
		s.served[r.Method+" "+r.Path] = true
	}
	return s
}

// noRoute answers a /v1 request that no route took: 405 when another
// method is served at its path, else 404.
func (s *Server) noRoute(c echo.Context) error {
	if len(s.allowed(c.Request())) > 0 {
		return echo.ErrMethodNotAllowed
	}
	return echo.ErrNotFound
}

// allowed are the methods served at r's path, in alphabetical order: the
// router is asked, for each method, which route it takes.
func (s *Server) allowed(r *http.Request) []string {
	var allow []string
	for _, m := range allowable {
		c := s.e.NewContext(r, nil)
		s.e.Router().Find(m, echo.GetPath(r), c)
		if s.served[m+" "+c.Path()] {
			allow = append(allow, m)
		}
	}
	return allow
}

// allowable are the methods an Allow header may list.
var allowable = []string{http.MethodConnect, http.MethodDelete, http.MethodGet, http.MethodHead,
	http.MethodOptions, http.MethodPatch, http.MethodPost, http.MethodPut, http.MethodTrace}

// Limit sets the caps on requests in flight (MaxInFlight,
// MaxInFlightPerClient of c; zero fields take the defaults). Call it before
// serving.
func (s *Server) Limit(c ServerConfig) { s.limit.set(c) }

func (s *Server) limitTotal(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		done, err := s.limit.enterTotal()
		if err != nil {
			return err
		}
		defer done()
		return next(c)
	}
}

func (s *Server) limitClient(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		done, err := s.limit.enterClient(client(c).Name)
		if err != nil {
			return err
		}
		defer done()
		return next(c)
	}
}

// holdBody gives the request its share of the body budget, taken by body
// and given back when the request ends.
func (s *Server) holdBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := &bodyHold{l: s.limit}
		defer h.release()
		c.Set(bodyHoldKey, h)
		return next(c)
	}
}

// ServeHTTP makes Server an http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.e.ServeHTTP(w, r) }

// Echo exposes the router so that other components can add routes; their
// requests are measured with http.route _OTHER (only the routes NewServer
// and Metrics register are label values, FM41).
func (s *Server) Echo() *echo.Echo { return s.e }

// Metrics serves h at GET /metrics (no authentication: scrape from the
// operator network), at most MaxConcurrentScrapes at once: a scrape
// encodes every series, and an unauthenticated flood of them would take
// the CPU the workers need (FM41). Beyond the cap: 429 with Retry-After.
func (s *Server) Metrics(h http.Handler) {
	scrapes := make(chan struct{}, MaxConcurrentScrapes)
	s.route(http.MethodGet, "/metrics", func(c echo.Context) error {
		select {
		case scrapes <- struct{}{}:
		default:
			return errorf(CodeTooManyRequests, "%d scrapes of /metrics are being served; retry later", MaxConcurrentScrapes)
		}
		defer func() { <-scrapes }()
		h.ServeHTTP(c.Response(), c.Request())
		return nil
	})
}

// MaxConcurrentScrapes bounds the /metrics scrapes served at once.
// Prometheus scrapes a target one at a time; two leaves room for a second
// Prometheus of a high-availability pair.
const MaxConcurrentScrapes = 2

// route registers a route and remembers its template as a label value.
func (s *Server) route(method, path string, h echo.HandlerFunc) {
	s.e.Add(method, path, h)
	s.routes[path] = true
	s.served[method+" "+path] = true
}

// measure records the request duration by route and status. Its labels
// run before authentication, so none may be what a client chose (FM41):
// the method is one of the standard ones or _OTHER, the route a template
// this server registered or _OTHER.
func (s *Server) measure(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		status := c.Response().Status
		if err != nil {
			status = statusOf(s.errorOf(err).Code)
		}
		s.g.met.httpDur.Record(c.Request().Context(), time.Since(start).Seconds(), metric.WithAttributes(
			attribute.String("http.route", s.routeOf(c)), attribute.String("http.request.method", methodLabel(c.Request().Method)),
			attribute.Int("http.response.status_code", status)))
		return err
	}
}

// routeOf is the route template c matched, or routeUnmatched: for a path
// no route matches echo may report the path itself.
func (s *Server) routeOf(c echo.Context) string {
	if p := c.Path(); s.routes[p] {
		return p
	}
	return routeUnmatched
}

// routeUnmatched is the http.route label of requests no route matched.
const routeUnmatched = "_OTHER"

// methodLabel is the http.request.method label of method: the method when
// it is one of the HTTP methods of RFC 9110 and RFC 5789, else _OTHER, as
// the OpenTelemetry HTTP semantic conventions ask. Any token is a valid
// method, so a label taken as sent is one series per invented method.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "_OTHER"
}

func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		cl, err := s.authenticateForwarded(c)
		if err == nil && cl == nil {
			cl, err = s.auth.authenticateRequest(c.Request())
		}
		if err != nil {
			return err
		}
		c.Set(clientKey, cl)
		return next(c)
	}
}

func client(c echo.Context) *Client { return c.Get(clientKey).(*Client) }

// leaseParam returns the authorised lease name of the path.
func leaseParam(c echo.Context) (string, error) {
	name, err := url.PathUnescape(c.Param("name"))
	if err != nil {
		return "", errorf(CodeInvalidRequest, "lease name in path is not valid percent-encoding")
	}
	if e := client(c).authorize(name); e != nil {
		return "", e
	}
	return name, nil
}

// body reads the request body within the body budget: its declared
// length is taken before a byte is read (429 at once beyond the budget,
// and the connection closed, as for the other caps), and a body of no
// declared length takes more as its buffer grows.
func (s *Server) body(c echo.Context) ([]byte, error) {
	r := c.Request()
	limit := s.g.cfg.Limits.MaxRequestBytes
	h, _ := c.Get(bodyHoldKey).(*bodyHold)
	if r.ContentLength > 0 && r.ContentLength <= int64(limit) && !h.grow(r.ContentLength+1) {
		return nil, s.limit.bodyBudgetError()
	}
	c.Set(bodyReadKey, true)
	b, err := readBody(r.Body, r.ContentLength, limit, func(n int) bool { return h.grow(int64(n)) })
	if err == nil {
		return b, nil
	}
	if err.Code == CodeTooManyRequests {
		return nil, s.limit.bodyBudgetError()
	}
	return nil, err
}

func (s *Server) acquire(c echo.Context) error {
	b, err := s.body(c)
	if err != nil {
		return err
	}
	req, derr := decodeAcquire(b)
	if derr != nil {
		return derr
	}
	if e := client(c).authorize(req.Name); e != nil {
		return e
	}
	req.Caller = client(c)
	grant, err := s.g.Acquire(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, grant)
}

// leaseAndBody returns the authorised lease of the path and the body,
// unless the request was forwarded to the lease's holder instead (done:
// err is the answer).
func (s *Server) leaseAndBody(c echo.Context) (name string, b []byte, done bool, err error) {
	if name, err = leaseParam(c); err != nil {
		return "", nil, true, err
	}
	if done, err = s.forwardFirst(c, name); done {
		return "", nil, true, err
	}
	b, err = s.body(c)
	return name, b, err != nil, err
}

func (s *Server) renew(c echo.Context) error {
	name, b, done, err := s.leaseAndBody(c)
	if done || err != nil {
		return err
	}
	owner, token, ttl, derr := decodeRenew(b)
	if derr != nil {
		return derr
	}
	res, err := s.g.Renew(c.Request().Context(), client(c), name, owner, token, ttl)
	if err != nil {
		return s.forwardAfter(c, name, b, err)
	}
	return c.JSON(http.StatusOK, res)
}

// generationParams returns the authorised lease of the path and the
// owner_id and token query parameters.
func generationParams(c echo.Context) (name, owner string, token int64, err error) {
	if name, err = leaseParam(c); err != nil {
		return "", "", 0, err
	}
	q := c.QueryParams()
	owner = q.Get("owner_id")
	if e := checkOwner(owner); e != nil {
		return "", "", 0, e
	}
	token, perr := strconv.ParseInt(q.Get("token"), 10, 64)
	if perr != nil || token <= 0 {
		return "", "", 0, errorf(CodeInvalidRequest, "query parameter \"token\" must be a positive integer, got %q", q.Get("token"))
	}
	return name, owner, token, nil
}

func (s *Server) release(c echo.Context) error {
	name, owner, token, err := generationParams(c)
	if err != nil {
		return err
	}
	if done, err := s.forwardFirst(c, name); done {
		return err
	}
	if err := s.g.Release(c.Request().Context(), client(c), name, owner, token); err != nil {
		return s.forwardAfter(c, name, nil, err)
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) checkpoint(c echo.Context) error {
	name, owner, token, err := generationParams(c)
	if err != nil {
		return err
	}
	wait, werr := checkpointWait(c.QueryParam("wait"))
	if werr != nil {
		return werr
	}
	res, err := s.g.Checkpoint(c.Request().Context(), client(c), name, owner, token, wait)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// checkpointWait parses the wait query parameter of a checkpoint read: a
// Go duration from 0 to MaxCheckpointWait, DefaultCheckpointWait when
// absent.
func checkpointWait(v string) (time.Duration, *Error) {
	if v == "" {
		return DefaultCheckpointWait, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > MaxCheckpointWait {
		return 0, errorf(CodeInvalidRequest, "query parameter \"wait\" must be a duration from 0s to %s, got %q", MaxCheckpointWait, v)
	}
	return d, nil
}

func (s *Server) produce(c echo.Context) error {
	name, b, done, err := s.leaseAndBody(c)
	if done || err != nil {
		return err
	}
	req, derr := decodeProduce(b, c.Request().Header.Get(echo.HeaderContentType), name, s.g.cfg.Limits)
	if derr != nil {
		s.g.met.batch(c.Request().Context(), outcomeInvalid, 0)
		return derr
	}
	req.Caller = client(c)
	res, err := s.g.Produce(c.Request().Context(), req)
	if err != nil {
		return s.forwardAfter(c, name, b, err)
	}
	return c.JSON(http.StatusOK, res)
}

// LeaseView is the operator view of a lease.
type LeaseView struct {
	Name    string `json:"name"`
	OwnerID string `json:"owner_id"`
	// Token is left out (0) for a client that may not act for the
	// generation's client (FM38): a token is what renews and writes.
	Token         int64     `json:"token,omitempty"`
	State         string    `json:"state"`
	Live          bool      `json:"live"`
	ExpiresAt     time.Time `json:"expires_at"`
	TTLMS         int64     `json:"ttl_ms"`
	Holder        string    `json:"holder"`
	ProducerID    int64     `json:"producer_id"`
	ProducerEpoch int16     `json:"producer_epoch"`
	// Events are the newest lease_events rows, newest first (single-lease
	// view only).
	Events []EventView `json:"events,omitempty"`
}

// EventView is one lease_events row.
type EventView struct {
	Kind          string    `json:"kind"`
	Token         int64     `json:"token,omitempty"`
	OwnerID       string    `json:"owner_id"`
	Holder        string    `json:"holder"`
	ProducerID    int64     `json:"producer_id"`
	ProducerEpoch int16     `json:"producer_epoch"`
	ExpiresAt     time.Time `json:"expires_at"`
	At            time.Time `json:"at"`
	// ForwardedBy names the replica that forwarded the request that made
	// the event (a release sent to another replica; FM89).
	ForwardedBy string `json:"forwarded_by,omitempty"`
}

// viewOf is the view of l for client cl: the token only for a client that
// may act for the generation's client (FM38).
func viewOf(l leasestore.Lease, cl *Client) LeaseView {
	v := LeaseView{Name: l.Name, OwnerID: l.OwnerID, State: string(l.State),
		Live: l.Live(), ExpiresAt: l.ExpiresAt, TTLMS: l.TTL.Milliseconds(), Holder: l.Holder,
		ProducerID: l.ProducerID, ProducerEpoch: l.ProducerEpoch}
	if cl.actsFor(l.Client) {
		v.Token = l.Token
	}
	return v
}

func (s *Server) get(c echo.Context) error {
	// Reads are authorised like writes: a lease's owner, token and history
	// are for the clients that may take it.
	name, err := leaseParam(c)
	if err != nil {
		return err
	}
	l, err := s.g.store.Get(c.Request().Context(), name)
	if err != nil {
		return err
	}
	evs, err := s.g.store.Events(c.Request().Context(), name, 20)
	if err != nil {
		return err
	}
	v := viewOf(l, client(c))
	for _, e := range evs {
		ev := EventView{Kind: e.Kind, OwnerID: e.OwnerID, Holder: e.Holder,
			ProducerID: e.ProducerID, ProducerEpoch: e.ProducerEpoch, ExpiresAt: e.ExpiresAt, At: e.At, ForwardedBy: e.ForwardedBy}
		if client(c).actsFor(e.Client) { // each event's generation, not the lease's (FM90)
			ev.Token = e.Token
		}
		v.Events = append(v.Events, ev)
	}
	return c.JSON(http.StatusOK, v)
}

func (s *Server) list(c echo.Context) error {
	q, qerr := listQueryOf(c.QueryParam("prefix"), c.QueryParam("after"), c.QueryParams()["limit"])
	if qerr != nil {
		return qerr
	}
	// Only the leases this client may take are listed, and the store is
	// asked only for names its patterns allow (FM40): the others are left
	// out, not refused, so a prefix spanning patterns still answers.
	cl := client(c)
	ls, next, err := s.g.list(c.Request().Context(), cl, q)
	if err != nil {
		return err
	}
	out := make([]LeaseView, 0, len(ls))
	for _, l := range ls {
		out = append(out, viewOf(l, cl))
	}
	return c.JSON(http.StatusOK, LeasePage{Leases: out, Next: next})
}

// LeasePage is a page of GET /v1/leases.
type LeasePage struct {
	Leases []LeaseView `json:"leases"`
	// Next is the cursor of the next page (?after=), empty when no lease
	// follows.
	Next string `json:"next,omitempty"`
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers from the last check when it is younger than the
// probe's interval, and otherwise waits for one check shared by every
// caller of the moment (FM43): each check costs a Postgres round trip and
// a metadata request, and /readyz needs no credentials. A drain is seen
// at once: it needs no query.
func (s *Server) readyz(c echo.Context) error {
	if s.g.draining.Load() {
		return errDraining()
	}
	if err := s.ready.Check(c.Request().Context()); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

// handleError writes every error as RFC 9457 problem+json.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	e := s.errorOf(err)
	status := statusOf(e.Code)
	switch {
	case e.Code == CodeLedgerBehind || e.Code == CodeDraining:
		// Expected and answered with where to go next: a ledger catching up
		// after a takeover, a replica stopping. Not an error of this
		// replica, and under load they would flood its log.
		s.log.Debug("request refused", "method", c.Request().Method, "path", c.Path(), "code", e.Code)
	case status >= 500:
		s.log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "code", e.Code, "error", err)
	}
	c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
	switch e.Code {
	case CodeTooManyRequests, CodeLedgerBehind:
		c.Response().Header().Set("Retry-After", "1")
	case CodeMethodNotAllowed:
		c.Response().Header().Set("Allow", strings.Join(s.allowed(c.Request()), ", "))
	}
	// Refused before its body was read (429, 401, 403, 413 by declared
	// length): close the connection instead of letting net/http drain the
	// body first, which a slow client would stretch to the read timeout
	// and delay the answer by as much.
	if r := c.Request(); r.ContentLength != 0 && c.Get(bodyReadKey) == nil {
		c.Response().Header().Set("Connection", "close")
	}
	c.Response().WriteHeader(status)
	_ = json.NewEncoder(c.Response()).Encode(problemOf(e))
}

// errorOf also maps echo's own errors (unknown route, wrong method).
func (s *Server) errorOf(err error) *Error {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return errorf(CodeNotFound, "no such route")
		case http.StatusMethodNotAllowed:
			return errorf(CodeMethodNotAllowed, "this method is not served at this path; the Allow header lists those that are")
		case http.StatusRequestEntityTooLarge:
			return errorf(CodePayloadTooLarge, "request body too large")
		}
		return errorf(CodeInvalidRequest, "%v", he.Message)
	}
	return toError(err)
}
