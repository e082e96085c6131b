package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/loadtest/baseline"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/rollout"
)

// The rollout states in the order a mixed-fleet run walks them.
var mixedStates = []leasestore.RolloutState{leasestore.Observe, leasestore.Gated, leasestore.Enforced}

// frozenLateBatches are the batches the frozen direct worker writes when
// it wakes.
const frozenLateBatches = 2

// mixedRun is one --mixed-fleet run: the gateway workers of the runner,
// the direct workers, and the admin client that walks the rollout.
type mixedRun struct {
	r *runner
	// started and ended bound the walk (the checks and the ACL step come
	// after it).
	started, ended time.Time
	admin          *client
	direct         *client
	// producer is the direct workers' own, as the direct principal.
	producer *kafka.Producer
	workers  []*directWorker
	// enforced closes when enforced was answered 200: the frozen worker
	// wakes.
	enforced chan struct{}
	// froze closes when the first direct worker froze.
	froze chan struct{}

	mu sync.Mutex
	// steps are the admin API's answers; stepAt when each state's step
	// was answered 200 (zero: not taken).
	steps  []report.RolloutStep
	stepAt map[leasestore.RolloutState]time.Time
	// enforceAsked is when the enforce step that was answered 200 was
	// sent.
	enforceAsked time.Time
	calls        []leaseCall
	writes       []directWrite
}

// leaseCall is a direct worker's lease call and its answer.
type leaseCall struct {
	Worker, Call string
	Sent         time.Time
	Granted      bool
	Code         string
}

// directWrite is one batch a direct worker wrote with its own producer.
type directWrite struct {
	Worker  string
	Late    bool // the frozen worker's, after it woke
	Started time.Time
	Done    time.Time
	// Partition and Offsets of the records Kafka acknowledged.
	Partition int32
	Offsets   []int64
	Err       string
}

// directWorker is an old binary: it takes its lease through the API with
// the direct client's token, checks it is still the holder by renewing,
// and writes with its own producer, unstamped.
type directWorker struct {
	id, lease string
	token     int64
	owned     bool
	renewed   time.Time
	seq       int
	// freeze: stop between the check and the write (the incident) until
	// enforced was answered, then write.
	freeze atomic.Bool
}

// mixedFleetEntry is the mixed-fleet scenario of the table (FM21): it
// runs in place of the runner's phases (RunMixed).
func mixedFleetEntry() entry {
	return entry{name: "mixed-fleet", proves: "a rollout observe -> gated -> enforced with old direct workers beside gateway workers: what was written before enforced is kept, nothing after it, and the ACL plan refuses the old principal (FM21)",
		flags:       []string{"--mixed-fleet", "--state-duration", "--direct-workers"},
		on:          func(sc Scenario, _ *stack.Stack) bool { return sc.MixedFleet },
		validate:    validateMixed,
		stackOption: stack.WithMixedFleet,
		run:         RunMixed,
		// The direct workers' records: the mixed checks judge them.
		ownRecords: directLog,
		report:     "mixed"}
}

// validateMixed fills the mixed fleet's defaults and checks them.
func validateMixed(s *Scenario) error {
	if !s.MixedFleet {
		return nil
	}
	if s.StateDuration == 0 {
		s.StateDuration = s.Duration / 3
	}
	if s.DirectWorkers == 0 {
		s.DirectWorkers = 2
	}
	switch {
	case s.StateDuration < s.TTL || s.StateDuration > time.Hour:
		return errors.New("state_duration must be in [ttl, 1h]")
	case s.DirectWorkers < 2 || s.DirectWorkers > 100:
		return errors.New("direct_workers must be 2..100")
	case s.Stateful:
		return errors.New("stateful and mixed_fleet do not combine")
	}
	return nil
}

// RunMixed runs the mixed fleet (Scenario.MixedFleet) on a stack started
// WithMixedFleet, verifies it and returns the report.
func RunMixed(ctx context.Context, s *stack.Stack, sc Scenario, opts Options) (*report.Report, error) {
	sc.MixedFleet = true
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	if !s.MixedFleet() {
		return nil, errors.New("--mixed-fleet needs a stack started with the mixed fleet's clients (--embedded)")
	}
	r := newRunner(s, sc, opts)
	m, err := newMixedRun(r)
	if err != nil {
		return nil, err
	}
	defer m.producer.Close()
	m.walk(ctx)
	rep := r.report()
	rep.Run = runInfo(m.started, opts.Command)
	rep.Gateway.Seconds = m.ended.Sub(m.started).Seconds()
	m.applyACLPlan(ctx, rep)
	if err := m.verify(ctx, rep); err != nil {
		return rep, err
	}
	rep.Finish()
	return rep, nil
}

func newMixedRun(r *runner) (*mixedRun, error) {
	p, err := baseline.NewProducer(r.stack.DirectKafka(), "")
	if err != nil {
		return nil, err
	}
	url := r.stack.URLs()[0]
	m := &mixedRun{r: r, admin: newClient(url, stack.AdminToken, 2), direct: newClient(url, stack.DirectToken, r.sc.DirectWorkers+2),
		producer: p, enforced: make(chan struct{}), froze: make(chan struct{}), stepAt: map[leasestore.RolloutState]time.Time{}}
	for i := range r.sc.DirectWorkers {
		m.workers = append(m.workers, &directWorker{id: fmt.Sprintf("old-%d", i), lease: fmt.Sprintf("shard:%d", r.sc.Leases+i)})
	}
	return m, nil
}

// walk takes observe, starts both fleets, gates after StateDuration (the
// first direct worker freezes), tries enforce once at once (refused while
// a direct lease is live), enforces after StateDuration (again until
// accepted, at most 3 x TTL more), runs StateDuration under enforced and
// stops the workers.
func (m *mixedRun) walk(ctx context.Context) {
	sc := m.r.sc
	m.started = time.Now()
	m.r.st = newStats(sc.Leases)
	m.step(ctx, leasestore.Observe)
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	m.r.startWorkers(wctx, &wg)
	for _, w := range m.workers {
		wg.Add(1)
		go func() { defer wg.Done(); m.directLoop(wctx, w) }()
	}
	wait(ctx, sc.StateDuration)
	m.workers[0].freeze.Store(true)
	select { // it froze holding its lease, or (no lease) the gate goes on
	case <-m.froze:
	case <-time.After(sc.TTL):
	}
	m.step(ctx, leasestore.Gated)
	m.step(ctx, leasestore.Enforced) // too early: the operator sees 409 and the blocking leases
	wait(ctx, sc.StateDuration)
	deadline := time.Now().Add(3 * sc.TTL)
	for ctx.Err() == nil && !m.took(leasestore.Enforced) && time.Now().Before(deadline) {
		if !m.step(ctx, leasestore.Enforced) {
			wait(ctx, sc.TTL/4)
		}
	}
	if m.took(leasestore.Enforced) {
		close(m.enforced)
	}
	wait(ctx, sc.StateDuration)
	stop()
	wg.Wait()
	m.ended = time.Now()
	m.status(ctx)
}

// took reports whether state's step was answered 200.
func (m *mixedRun) took(state leasestore.RolloutState) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.stepAt[state].IsZero()
}

// step asks the admin API to move the pattern to state and records the
// answer; it reports whether the step was taken.
func (m *mixedRun) step(ctx context.Context, state leasestore.RolloutState) bool {
	body := jsonBody(map[string]any{"pattern": stack.MixedPattern, "state": string(state), "reason": "loadtest --mixed-fleet"})
	asked := time.Now()
	status, answer := m.adminCall(ctx, http.MethodPost, "/v1/admin/rollouts", body)
	answered := time.Now()
	m.record(report.RolloutStep{Method: "POST", State: string(state), Status: status, Answer: answer}, asked, answered)
	if status != http.StatusOK {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stepAt[state].IsZero() {
		m.stepAt[state] = answered
		if state == leasestore.Enforced {
			m.enforceAsked = asked
		}
	}
	return true
}

// status records the admin API's GET of the pattern.
func (m *mixedRun) status(ctx context.Context) {
	asked := time.Now()
	status, answer := m.adminCall(ctx, http.MethodGet, "/v1/admin/rollouts?pattern="+stack.MixedPattern, nil)
	m.record(report.RolloutStep{Method: "GET", Status: status, Answer: answer}, asked, time.Now())
}

func (m *mixedRun) record(s report.RolloutStep, asked, answered time.Time) {
	s.AskedS, s.AnsweredS = asked.Sub(m.started).Seconds(), answered.Sub(m.started).Seconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.steps = append(m.steps, s)
}

// adminCall sends one admin API request and returns the status and the
// body as it came (an error's problem document included).
func (m *mixedRun) adminCall(ctx context.Context, method, path string, body []byte) (int, json.RawMessage) {
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), method, m.admin.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, jsonBody(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+m.admin.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.admin.control.Do(req)
	if err != nil {
		return 0, jsonBody(err.Error())
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var compact bytes.Buffer
	if json.Compact(&compact, raw) != nil {
		return resp.StatusCode, jsonBody(string(raw))
	}
	return resp.StatusCode, compact.Bytes()
}

// directLoop is an old binary's loop: take the lease, renew it when due
// (a refused renewal ends its hold), write while it holds it.
func (m *mixedRun) directLoop(ctx context.Context, w *directWorker) {
	sc := m.r.sc
	pause := sc.TTL / 20
	if sc.Rate > 0 {
		pause = time.Duration(float64(time.Second) / sc.Rate)
	}
	for ctx.Err() == nil {
		switch {
		case !w.owned:
			if !m.acquire(ctx, w) {
				wait(ctx, sc.TTL/4)
			}
		case w.freeze.Swap(false):
			m.frozen(ctx, w)
		case time.Since(w.renewed) >= sc.RenewEvery:
			m.renew(ctx, w)
		default:
			m.write(w, false)
			wait(ctx, pause)
		}
	}
}

func (m *mixedRun) acquire(ctx context.Context, w *directWorker) bool {
	sent := time.Now()
	rep := m.direct.do(ctx, "POST", "/v1/leases", jsonBody(map[string]any{
		"name": w.lease, "owner_id": w.id, "ttl_ms": m.r.sc.TTL.Milliseconds()}))
	m.logCall(w, "acquire", sent, rep)
	if rep.status != http.StatusCreated {
		return false
	}
	var g struct {
		Token int64 `json:"token"`
	}
	rep.decode(&g)
	w.token, w.renewed, w.owned = g.Token, sent, true
	return true
}

func (m *mixedRun) renew(ctx context.Context, w *directWorker) {
	sent := time.Now()
	rep := m.direct.do(ctx, "PATCH", "/v1/leases/"+w.lease, jsonBody(map[string]any{
		"owner_id": w.id, "token": w.token, "ttl_ms": m.r.sc.TTL.Milliseconds()}))
	m.logCall(w, "renew", sent, rep)
	if rep.status == http.StatusOK {
		w.renewed = sent
		return
	}
	w.owned = false
}

func (m *mixedRun) logCall(w *directWorker, call string, sent time.Time, rep reply) {
	if rep.status == 0 {
		m.r.st.error("direct "+call, rep)
	}
	c := leaseCall{Worker: w.id, Call: call, Sent: sent, Granted: rep.status == http.StatusOK || rep.status == http.StatusCreated,
		Code: rep.problem.Code}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, c)
}

// frozen is the incident: the old binary checked its lease, then stops
// past its TTL (through gated, until enforced was answered), wakes and
// writes.
func (m *mixedRun) frozen(ctx context.Context, w *directWorker) {
	close(m.froze)
	select {
	case <-ctx.Done():
		return
	case <-m.enforced:
	}
	for range frozenLateBatches {
		m.write(w, true)
	}
	w.owned = false
}

// write produces one batch of unstamped records to the lease's partition
// with the direct workers' producer, and logs it.
func (m *mixedRun) write(w *directWorker, late bool) {
	w.seq++
	d := directWrite{Worker: w.id, Late: late, Started: time.Now(), Partition: m.r.partition(w.lease)}
	topic := m.r.stack.Topic()
	n := m.r.sc.BatchSize
	dch := make(chan kafka.Event, n)
	for i := range n {
		err := m.producer.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: d.Partition},
			Value: fmt.Appendf(nil, "%s/%d/%d", w.id, w.seq, i)}, dch)
		if err != nil {
			d.Err = err.Error()
			n = i
			break
		}
	}
	for range n {
		msg := (<-dch).(*kafka.Message)
		if msg.TopicPartition.Error != nil {
			d.Err = msg.TopicPartition.Error.Error()
			continue
		}
		d.Offsets = append(d.Offsets, int64(msg.TopicPartition.Offset))
	}
	d.Done = time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes = append(m.writes, d)
}

// applyACLPlan is the final step: enforced's ACL plan (from the admin
// API's answer) applied through the Kafka admin API, then one more write
// of the direct principal, which the broker must refuse.
func (m *mixedRun) applyACLPlan(ctx context.Context, rep *report.Report) {
	mixed := &report.MixedFigures{}
	rep.Mixed = mixed
	a := &mixed.ACL
	plan, err := m.enforcedPlan()
	if err != nil {
		a.Error = err.Error()
		return
	}
	for _, c := range plan {
		a.Plan = append(a.Plan, fmt.Sprintf("remove %s on %s from %s (%s)", c.Operation, c.Topic, c.Principal, c.Client))
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if a.Deleted, err = rollout.ApplyACLPlan(actx, m.r.stack.Kafka, plan); err != nil {
		a.Error = err.Error()
		return
	}
	a.NextWrite = m.nextWrite()
}

// enforcedPlan is the ACL plan of the enforce step's 200 answer.
func (m *mixedRun) enforcedPlan() ([]rollout.ACLChange, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.steps {
		if s.State == string(leasestore.Enforced) && s.Status == http.StatusOK {
			var v struct {
				ACLPlan []rollout.ACLChange `json:"acl_plan"`
			}
			err := json.Unmarshal(s.Answer, &v)
			return v.ACLPlan, err
		}
	}
	return nil, errors.New("enforced was never answered 200: no ACL plan")
}

// nextWrite writes one record as the direct principal and returns the
// broker's answer: its error code's name, or "delivered".
func (m *mixedRun) nextWrite() string {
	topic := m.r.stack.Topic()
	dch := make(chan kafka.Event, 1)
	err := m.producer.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0},
		Value: []byte("after the ACL plan")}, dch)
	if err == nil {
		err = (<-dch).(*kafka.Message).TopicPartition.Error
	}
	var kerr kafka.Error
	switch {
	case err == nil:
		return "delivered"
	case errors.As(err, &kerr):
		return kafkaCodeName(kerr.Code())
	}
	return err.Error()
}

// kafkaCodeName is the protocol's name of an error code
// (TOPIC_AUTHORIZATION_FAILED), or librdkafka's text for others.
func kafkaCodeName(c kafka.ErrorCode) string {
	if c == kafka.ErrTopicAuthorizationFailed {
		return topicAuthorizationFailed
	}
	return c.String()
}

// topicAuthorizationFailed is the broker's refusal of a principal without
// Write on the topic.
const topicAuthorizationFailed = "TOPIC_AUTHORIZATION_FAILED"
