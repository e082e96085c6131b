package gateway

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/rollout"
)

// adminRollouts is the admin API's rollout path (docs/api.md, "Admin").
const adminRollouts = "/v1/admin/rollouts"

// Admin serves the admin API over r: GET and POST /v1/admin/rollouts,
// for clients whose config says admin: true (403 forbidden for others).
// clients are the config's, for the ACL plan of enforce.
func (s *Server) Admin(r *rollout.Rollouts, clients []fileconfig.Client) {
	a := &admin{r: r, clients: clients}
	chain := []echo.MiddlewareFunc{s.limitTotal, s.authenticate, s.limitClient, s.holdBody, requireAdmin}
	s.e.GET(adminRollouts, a.statuses, chain...)
	s.e.POST(adminRollouts, func(c echo.Context) error { return a.step(c, s) }, chain...)
	s.routes[adminRollouts] = true
}

type admin struct {
	r       *rollout.Rollouts
	clients []fileconfig.Client
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
			plan = append(plan, rollout.ACLPlan(a.clients, rt)...)
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
		return &Error{Code: CodeRolloutStepRefused, Detail: err.Error(), Extra: map[string]any{
			"pattern": step.Pattern, "rollout_state": step.From, "blocking_leases": blocking}}
	case errors.Is(err, rollout.ErrMarkersUnknown):
		return &Error{Code: CodeStoreUnavailable, Detail: err.Error() + "; take the step again"}
	}
	return err
}
