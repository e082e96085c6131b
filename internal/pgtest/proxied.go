package pgtest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/internal/netfault"
)

// Proxied returns a pool on db reached through a fault proxy (netfault),
// and the proxy: what the pool's connections go through can be cut,
// slowed or half-opened while db's own pool is untouched, so a test still
// reads the database's truth. Both close when t ends.
func Proxied(t testing.TB, db *DB) (*pgxpool.Pool, *netfault.Link) {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	link, err := netfault.New("postgres", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Close)
	u.Host = link.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatalf("pgtest: proxied pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, link
}
