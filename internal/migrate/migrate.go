// Package migrate applies one line of numbered SQL migrations embedded in
// the package that owns the tables: each file once, in order, in its own
// transaction, recorded in a table of that line's own, under an advisory
// lock so that replicas starting at once do not race. The lease store and
// the ledger each have their own line; neither knows the other's tables.
//
// It must never know a table itself, nor apply a migration twice or out
// of order: the owning package embeds its files, and the record table and
// the advisory lock decide what runs.
package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Line is one package's migrations.
type Line struct {
	// Files holds Dir/NNNN_name.sql.
	Files fs.FS
	Dir   string
	// Table records the applied versions (a constant name, never input).
	Table string
	// LockID is the line's transaction-scoped advisory lock.
	LockID int64
}

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the line's files in version order.
func (l Line) Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(l.Files, l.Dir)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %q: name must start with a number and '_'", e.Name())
		}
		body, err := fs.ReadFile(l.Files, l.Dir+"/"+e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Apply applies every migration of the line not yet recorded and returns
// the versions it applied.
func (l Line) Apply(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	ms, err := l.Migrations()
	if err != nil {
		return nil, err
	}
	create := `CREATE TABLE IF NOT EXISTS ` + l.Table + ` (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`
	// Under the line's lock: concurrent CREATE TABLE IF NOT EXISTS
	// collide on pg_type's unique index (replicas or init containers
	// migrating an empty database at once).
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, l.LockID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, create)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", l.Table, err)
	}
	var applied []int
	for _, m := range ms {
		done, err := l.applyOne(ctx, pool, m)
		if err != nil {
			return applied, fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if done {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

func (l Line) applyOne(ctx context.Context, pool *pgxpool.Pool, m Migration) (bool, error) {
	applied := false
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, l.LockID); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+l.Table+` WHERE version = $1)`, m.Version).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+l.Table+` (version, name) VALUES ($1, $2)`, m.Version, m.Name)
		applied = err == nil
		return err
	})
	return applied, err
}
