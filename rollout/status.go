package rollout

import (
	"context"
	"time"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// Status is where one route pattern stands.
type Status struct {
	Pattern   string                  `json:"pattern"`
	Topic     string                  `json:"topic"`
	State     leasestore.RolloutState `json:"state"`
	Version   int64                   `json:"version"`
	ChangedAt *time.Time              `json:"changed_at,omitempty"`
	ChangedBy string                  `json:"changed_by,omitempty"`
	Reason    string                  `json:"reason,omitempty"`
	// DirectLeases are the live leases of the pattern held by direct
	// clients, and LastLapse when the last of them lapses (gated waits
	// for it; enforced needs none).
	DirectLeases []DirectLease `json:"direct_leases"`
	LastLapse    *time.Time    `json:"last_lapse,omitempty"`
}

// DirectLease is a live lease held by a direct client.
type DirectLease struct {
	Name      string    `json:"name"`
	Client    string    `json:"client"`
	Token     int64     `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Statuses returns the status of each route whose pattern is pattern
// ("": every route), in config order.
func (r *Rollouts) Statuses(ctx context.Context, pattern string) ([]Status, error) {
	var out []Status
	for _, rt := range r.Router.Routes() {
		if pattern != "" && rt.Pattern != pattern {
			continue
		}
		st, err := r.status(ctx, rt)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	if pattern != "" && len(out) == 0 {
		_, err := r.route(pattern)
		return nil, err
	}
	return out, nil
}

func (r *Rollouts) status(ctx context.Context, rt txnmap.Route) (Status, error) {
	ro, err := r.Store.RolloutOf(ctx, rt.Pattern)
	if err != nil {
		return Status{}, err
	}
	st := Status{Pattern: rt.Pattern, Topic: rt.Topic, State: ro.State, Version: ro.Version,
		ChangedBy: ro.ChangedBy, Reason: ro.Reason, DirectLeases: []DirectLease{}}
	if ro.Version > 0 {
		st.ChangedAt = &ro.ChangedAt
	}
	held, err := r.Store.DirectLeases(ctx, rt.Pattern, r.DirectClients, r.Router.PatternOf)
	if err != nil {
		return Status{}, err
	}
	for _, l := range held {
		st.DirectLeases = append(st.DirectLeases, DirectLease{Name: l.Name, Client: l.Client, Token: l.Token, ExpiresAt: l.ExpiresAt})
		if st.LastLapse == nil || l.ExpiresAt.After(*st.LastLapse) {
			at := l.ExpiresAt
			st.LastLapse = &at
		}
	}
	return st, nil
}

// ACLChange is one Kafka ACL that enforce removes: a direct client's
// Write on the topic of the pattern.
type ACLChange struct {
	Client    string `json:"client"`
	Principal string `json:"principal"`
	Topic     string `json:"topic"`
	Operation string `json:"operation"`
}

// String is the change as an operator reads it (kafka-acls.sh terms).
func (c ACLChange) String() string {
	return "remove: --allow-principal " + c.Principal + " --operation " + c.Operation + " --topic " + c.Topic +
		" (client " + c.Client + ")"
}

// ACLPlan lists the ACLs to remove once route is enforced: Write on its
// topic for every direct client that can acquire any lease of the route
// (txnmap.Router.Reaches: an allow pattern that reaches only part of the
// route counts, FM87). A direct client without a kafka_principal is
// listed with an empty principal: its Kafka identity is the operator's
// to find.
func (r *Rollouts) ACLPlan(clients []fileconfig.Client, route txnmap.Route) []ACLChange {
	var out []ACLChange
	for _, c := range clients {
		if !c.IsDirect() || !r.reachesAny(c.Allow, route.Pattern) {
			continue
		}
		out = append(out, ACLChange{Client: c.Name, Principal: c.KafkaPrincipal, Topic: route.Topic, Operation: "Write"})
	}
	return out
}

// reachesAny says whether one of a client's allow patterns reaches a
// lease of the route whose pattern is pattern.
func (r *Rollouts) reachesAny(allow []string, pattern string) bool {
	for _, a := range allow {
		if r.Router.Reaches(a, pattern) {
			return true
		}
	}
	return false
}
