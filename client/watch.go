package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Event is one event of a watch stream: a transition of a lease
// (acquired, regenerated, activated, released, superseded, abandoned).
// Token is 0 when the gateway does not show it to this client (a
// generation of another API client).
type Event struct {
	ID            int64     `json:"id"`
	Name          string    `json:"name"`
	Kind          string    `json:"kind"`
	OwnerID       string    `json:"owner_id"`
	Token         int64     `json:"token,omitempty"`
	Holder        string    `json:"holder"`
	ProducerID    int64     `json:"producer_id"`
	ProducerEpoch int16     `json:"producer_epoch"`
	ExpiresAt     time.Time `json:"expires_at"`
	At            time.Time `json:"at"`
}

// NoticeError is the cause of a lease lost to a watch notice: an event
// showed a later generation (Reason "taken_over") or the end of the
// lease's own (Reason "released", "superseded" or "abandoned"). A notice
// only ever ends a lease sooner than its renewal would: the renewal stays
// the safety net, and the gateway's fences hold without any notice.
type NoticeError struct {
	Reason string
	Event  Event
}

// Error says which event ended the lease and why.
func (e *NoticeError) Error() string {
	return fmt.Sprintf("notice: lease %s %s (event %d %s, token %d, owner %q)",
		e.Event.Name, strings.ReplaceAll(e.Reason, "_", " "), e.Event.ID, e.Event.Kind, e.Event.Token, e.Event.OwnerID)
}

// watchIdle is how long a stream may stay silent (no event, no
// heartbeat) before it is taken for broken and opened again: above the
// gateway's heartbeat interval (15s by default), below a TTL's worth of
// renewals.
const watchIdle = time.Minute

// Watch calls fn for each event of the leases whose name starts with
// prefix that this client may take ("" for all), in event id order, each
// once, until ctx ends (returning its error) or fn returns an error
// (returned). after resumes after that event id (-1: from now). A broken
// stream is opened again with Last-Event-ID, after a backoff; a refusal
// (forbidden, invalid_request, a gateway that serves no watch streams:
// not_found) is returned as a *Problem.
//
// Events are notices, never a safety signal: they may come late, or not
// until the stream is back.
func (c *Client) Watch(ctx context.Context, prefix string, after int64, fn func(Event) error) error {
	return c.watch(ctx, "/v1/events?prefix="+url.QueryEscape(prefix), after, fn)
}

// watch follows the stream at path, reopening it after a break.
func (c *Client) watch(ctx context.Context, path string, after int64, fn func(Event) error) error {
	hc := &http.Client{Transport: c.cfg.HTTP.Transport, Jar: c.cfg.HTTP.Jar, CheckRedirect: c.cfg.HTTP.CheckRedirect}
	for n := 1; ; n++ {
		err := c.stream(ctx, hc, path, &after, fn)
		var p *Problem
		var fnErr *watchFnError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &fnErr):
			return fnErr.err
		case errors.As(err, &p) && p.Status != http.StatusTooManyRequests && p.Status < 500:
			return err
		}
		if err == nil {
			n = 0 // a stream that ended cleanly (a drain): reopen at once
		}
		c.log.Debug("watch stream broken, reopening", "path", path, "after", after, "err", err)
		if n > 0 {
			if err := sleep(ctx, c.backoff(n, err)); err != nil {
				return err
			}
		}
	}
}

// watchFnError carries the error of a Watch callback out of the stream.
type watchFnError struct{ err error }

func (e *watchFnError) Error() string { return e.err.Error() }

// stream reads one stream until it ends, moving *after past each event.
func (c *Client) stream(ctx context.Context, hc *http.Client, path string, after *int64, fn func(Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cfg.BaseURL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Accept", "text/event-stream")
	if *after >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*after, 10))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		p := &Problem{}
		_ = json.Unmarshal(raw, p)
		p.Status, p.RetryAfter = resp.StatusCode, retryAfter(resp.Header)
		return p
	}
	idle := time.AfterFunc(watchIdle, cancel)
	defer idle.Stop()
	return readEvents(resp.Body, func() { idle.Reset(watchIdle) }, func(e Event) error {
		if e.ID <= *after {
			return nil
		}
		*after = e.ID
		if err := fn(e); err != nil {
			return &watchFnError{err}
		}
		return nil
	})
}

// readEvents parses Server-Sent Events from r: read is called for every
// line, fn for every event with an id and data.
func readEvents(r io.Reader, read func(), fn func(Event) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var data string
	for sc.Scan() {
		read()
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "data:"):
			data = strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		case line == "" && data != "":
			var e Event
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				return fmt.Errorf("fencegate: watch event: %w", err)
			}
			data = ""
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

// watchLoop watches the lease's events until it is released or lost, and
// loses it at the first that shows a later generation or its end.
func (l *Lease) watchLoop() {
	ctx, cancel := context.WithCancel(l.ctx)
	defer cancel()
	go func() {
		select {
		case <-l.lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := l.c.watch(ctx, "/v1/leases/"+url.PathEscape(l.name)+"/events", -1, func(e Event) error {
		l.notice(e)
		return nil
	})
	if ctx.Err() == nil {
		l.c.log.Debug("not watching the lease; the renewal alone tells its loss", "lease", l.name, "err", err)
	}
}

// notice loses the lease if e shows a generation later than the current
// one, or the current one's end. A new generation this SDK asked for is
// waited for first (regen): its own event is no loss.
func (l *Lease) notice(e Event) {
	l.regen.Lock()
	defer l.regen.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.grant.Token
	var reason string
	switch e.Kind {
	case "acquired", "regenerated":
		// A token hidden from this client is another client's generation:
		// later than ours if granted after ours.
		if e.Token > cur || e.Token == 0 && e.OwnerID != l.c.cfg.Owner && e.At.After(l.grantedAt()) {
			reason = "taken_over"
		}
	case "released", "superseded", "abandoned":
		if e.Token == cur {
			reason = e.Kind
		}
	}
	// Once Release began (l.ctx ended) the lease ends as released, not
	// to a notice of its own release.
	if reason == "" || l.err != nil || l.ctx.Err() != nil {
		return
	}
	l.loseLocked(&NoticeError{Reason: reason, Event: e})
}

// grantedAt is when the current generation was granted, in the gateway's
// time (its expiry at grant less its TTL). l.mu is held.
func (l *Lease) grantedAt() time.Time {
	return l.grant.ExpiresAt.Add(-time.Duration(l.grant.TTLMillis) * time.Millisecond)
}
