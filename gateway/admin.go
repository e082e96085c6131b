package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/rollout"
)

// adminRollouts is the admin API's rollout path (docs/api.md, "Admin").
const adminRollouts = "/v1/admin/rollouts"

// Admin serves the admin API over r: GET and POST /v1/admin/rollouts,
// for clients whose config says admin: true (403 forbidden for others).
// clients are the config's, for the ACL plan of enforce.
func (s *Server) Admin(r *rollout.Rollouts, clients []fileconfig.Client) error {
	a := &admin{r: r, clients: clients}
	if err := a.rolloutGauges(s.g.cfg.MeterProvider); err != nil {
		return err
	}
	chain := []echo.MiddlewareFunc{s.limitTotal, s.authenticate, s.limitClient, s.holdBody, requireAdmin}
	s.e.GET(adminRollouts, a.statuses, chain...)
	s.e.POST(adminRollouts, func(c echo.Context) error { return a.step(c, s) }, chain...)
	s.routes[adminRollouts] = true
	return nil
}

type admin struct {
	r       *rollout.Rollouts
	clients []fileconfig.Client

	mu     sync.Mutex // guards the metrics' reading
	last   []rollout.Status
	readAt time.Time
}

func requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if cl := client(c); cl == nil || !cl.Admin {
			return errorf(CodeForbidden, "the admin API needs a client whose config says admin: true")
		}
		return next(c)
	}
}

// RolloutView is one pattern's status in the admin API, with the ACL
// changes enforce implies.
type RolloutView struct {
	rollout.Status
	ACLPlan []rollout.ACLChange `json:"acl_plan"`
}

// RolloutPage is GET /v1/admin/rollouts.
type RolloutPage struct {
	Rollouts []RolloutView `json:"rollouts"`
}

func (a *admin) statuses(c echo.Context) error {
	sts, err := a.r.Statuses(c.Request().Context(), c.QueryParam("pattern"))
	if err != nil {
		return err
	}
	page := RolloutPage{Rollouts: make([]RolloutView, 0, len(sts))}
	for _, st := range sts {
		page.Rollouts = append(page.Rollouts, a.view(st))
	}
	return c.JSON(http.StatusOK, page)
}

func (a *admin) view(st rollout.Status) RolloutView {
	plan := []rollout.ACLChange{}
	for _, rt := range a.r.Router.Routes() {
		if rt.Pattern == st.Pattern {
			plan = append(plan, a.r.ACLPlan(a.clients, rt)...)
		}
	}
	return RolloutView{Status: st, ACLPlan: plan}
}

// stepBody is POST /v1/admin/rollouts.
type stepBody struct {
	Pattern *string `json:"pattern"`
	State   *string `json:"state"`
	Reason  string  `json:"reason"`
	Force   bool    `json:"force"`
}

func (a *admin) step(c echo.Context, s *Server) error {
	b, err := s.body(c)
	if err != nil {
		return err
	}
	var body stepBody
	if e := strictJSON(b, &body); e != nil {
		return e
	}
	if body.Pattern == nil || body.State == nil {
		return errorf(CodeInvalidRequest, "pattern and state are required")
	}
	to, perr := leasestore.ParseRolloutState(*body.State)
	if perr != nil {
		return errorf(CodeInvalidRequest, "%v", perr)
	}
	ctx := c.Request().Context()
	_, err = a.r.Step(ctx, leasestore.RolloutChange{Pattern: *body.Pattern, To: to, Actor: client(c).Name,
		Reason: body.Reason, Force: body.Force})
	if err != nil {
		return rolloutError(err)
	}
	sts, err := a.r.Statuses(ctx, *body.Pattern)
	if err != nil || len(sts) != 1 {
		return errors.Join(err, errorf(CodeInternal, "status after the step"))
	}
	return c.JSON(http.StatusOK, a.view(sts[0]))
}

// rolloutError answers a refused step 409 rollout_step_refused with the
// states and the blocking leases; markers that may be on the topic with
// no state recorded 503 outcome unknown (take the step again).
func rolloutError(err error) error {
	var step *leasestore.StepError
	switch {
	case errors.As(err, &step):
		blocking := make([]string, 0, len(step.Blocking))
		for _, l := range step.Blocking {
			blocking = append(blocking, l.Name)
		}
		return &Error{Code: CodeRolloutStepRefused, Detail: err.Error(),
			Members: Members{Pattern: step.Pattern, RolloutState: step.From, BlockingLeases: blocking}}
	case errors.Is(err, rollout.ErrMarkersUnknown):
		return &Error{Code: CodeStoreUnavailable, Detail: err.Error() + "; take the step again"}
	}
	return err
}

// rolloutMetricsEvery bounds how often a scrape reads the rollout states:
// a scrape within it reuses the last reading.
const rolloutMetricsEvery = 10 * time.Second

// rolloutGauges exports fencegate.rollout.state (1 for the state each
// pattern is in, 0 for the others) and fencegate.rollout.direct_leases
// per pattern. Patterns come from the config, never from a request.
func (a *admin) rolloutGauges(mp metric.MeterProvider) error {
	m := mp.Meter("github.com/fencegate/fencegate/gateway")
	state, err := m.Int64ObservableGauge("fencegate.rollout.state", metric.WithUnit("{state}"),
		metric.WithDescription("1 for the rollout state each route pattern is in (observe, gated, enforced), 0 for the others."))
	if err != nil {
		return err
	}
	direct, err := m.Int64ObservableGauge("fencegate.rollout.direct_leases", metric.WithUnit("{lease}"),
		metric.WithDescription("Live leases of each route pattern held by clients of kind direct."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for _, st := range a.cached(ctx) {
			p := attribute.String("pattern", st.Pattern)
			for _, s := range []leasestore.RolloutState{leasestore.Observe, leasestore.Gated, leasestore.Enforced} {
				v := int64(0)
				if st.State == s {
					v = 1
				}
				o.ObserveInt64(state, v, metric.WithAttributes(p, attribute.String("state", string(s))))
			}
			o.ObserveInt64(direct, int64(len(st.DirectLeases)), metric.WithAttributes(p))
		}
		return nil
	}, state, direct)
	return err
}

// cached returns the statuses read at most rolloutMetricsEvery ago; a
// failed reading keeps the last one (the store's own metrics say it
// failed).
func (a *admin) cached(ctx context.Context) []rollout.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	if time.Since(a.readAt) < rolloutMetricsEvery {
		return a.last
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if sts, err := a.r.Statuses(ctx, ""); err == nil {
		a.last, a.readAt = sts, time.Now()
	}
	return a.last
}
