package stack

import (
	"context"
	"log/slog"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/internal/netfault"
)

// WithNetFaults puts a fault proxy (internal/netfault, toxiproxy's) on the
// links of the embedded stack: in front of every broker, advertised so
// that every client (the gateway, the materializer, the harness's readers)
// goes through it, and between the gateway and materializer and Postgres
// (the harness's own pool stays direct, so the checks read the truth).
// The run's --net-fault applies faults to them (NetLinks). In-process
// gateway only.
func WithNetFaults() StackOption {
	return func(s *Stack) error {
		s.brokerLinks = &netfault.Links{}
		return nil
	}
}

// NetLinks returns the stack's fault proxies: the brokers' and Postgres's
// (nil without WithNetFaults).
func (s *Stack) NetLinks() (brokers *netfault.Links, postgres *netfault.Link) {
	return s.brokerLinks, s.pgLink
}

// componentPool is the pool of the gateway and the materializer: through
// the Postgres proxy with WithNetFaults, else the harness's own.
func (s *Stack) componentPool(ctx context.Context) (*pgxpool.Pool, error) {
	if s.brokerLinks == nil {
		return s.Pool, nil
	}
	if s.faultPool != nil {
		return s.faultPool, nil
	}
	u, err := url.Parse(s.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if s.pgLink, err = netfault.New("postgres", u.Host); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.pgLink.Close)
	u.Host = s.pgLink.Addr
	if s.faultPool, err = pgxpool.New(ctx, u.String()); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.faultPool.Close)
	return s.faultPool, nil
}

// superviseDelay is the materializer's restart delay after an error, as a
// service manager's (systemd's RestartSec).
const superviseDelay = 200 * time.Millisecond

// supervise runs run until ctx ends, again after superviseDelay whenever
// it stops with an error (a link cut by a fault, a Postgres restart), as
// the materializer's service manager would.
func supervise(ctx context.Context, run func(context.Context) error, log *slog.Logger) error {
	for {
		err := run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("materializer stopped; restarting", "error", err, "after", superviseDelay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(superviseDelay):
		}
	}
}
