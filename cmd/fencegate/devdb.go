package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// devDatabaseURL is the database of `fencegate dev` unless --database-url
// (FENCEGATE_DATABASE_URL) names another: its own, on the throwaway
// cluster of deploy/dev/pg.sh, next to (never) the `fencegate` database
// that pg.sh creates for operators and scripts.
const devDatabaseURL = "postgres://fencegate@127.0.0.1:54329/fencegate_dev?sslmode=disable"

// devDatabaseMark is the comment `fencegate dev` puts on a database it
// created. dev clears the ledger and the recorded placements of a marked
// database at every start and refuses every other database (FM45): a
// FENCEGATE_DATABASE_URL left in the shell must not cost a real ledger.
const devDatabaseMark = "created by fencegate dev, which clears its ledger and route placements at every start"

// qDevDatabaseMark reads the comment of the connected database.
const qDevDatabaseMark = `SELECT coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database WHERE datname = current_database()`

// errNotDevDatabase is a database dev did not create: it never clears it.
var errNotDevDatabase = errors.New("not created by `fencegate dev`")

// ensureDevDatabase makes sure url names a database dev created: one
// that does not exist yet is created (from the server's "postgres"
// database) and marked; one that exists unmarked is refused with
// errNotDevDatabase, before anything in it is touched.
//
// It returns the database's name.
func ensureDevDatabase(ctx context.Context, url string, log *slog.Logger) (string, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return "", err
	}
	name := cfg.ConnConfig.Database
	mark, err := readDevMark(ctx, cfg.ConnConfig)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name: no such database
		if err := createDevDatabase(ctx, cfg.ConnConfig, name); err != nil {
			return "", fmt.Errorf("create the development database %q: %w", name, err)
		}
		log.Info("created the development database", "database", name)
		mark, err = readDevMark(ctx, cfg.ConnConfig)
	}
	if err != nil {
		return "", err
	}
	if mark != devDatabaseMark {
		return "", fmt.Errorf("database %q: %w, which clears the ledger and route placements of its database at every start; "+
			"it leaves this one alone. Run dev without --database-url (FENCEGATE_DATABASE_URL) to use its own %q, "+
			"or name a database that does not exist yet (dev creates and marks it)", name, errNotDevDatabase,
			mustDatabase(devDatabaseURL))
	}
	return name, nil
}

// requireDevDatabase refuses a database `fencegate dev` did not create
// (FM93): `dev --join` serves it with the public development token and
// replica credential, so on any other database anyone who has read the
// README could take and write its leases. It creates nothing.
func requireDevDatabase(ctx context.Context, url string) error {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	mark, err := readDevMark(ctx, cfg.ConnConfig)
	if err != nil {
		return fmt.Errorf("dev --join: database %q: %w (start `fencegate dev` first)", cfg.ConnConfig.Database, err)
	}
	if mark != devDatabaseMark {
		return fmt.Errorf("dev --join: database %q: %w; --join serves only the database of a running `fencegate dev`, "+
			"on the public development credentials: serve a database of your own with `fencegate serve` and credentials of your own",
			cfg.ConnConfig.Database, errNotDevDatabase)
	}
	return nil
}

func readDevMark(ctx context.Context, cc *pgx.ConnConfig) (string, error) {
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var mark string
	err = conn.QueryRow(ctx, qDevDatabaseMark).Scan(&mark)
	return mark, err
}

// createDevDatabase creates and marks database name on the server of cc.
// A database another dev created meanwhile (42P04) is left to the mark
// check.
func createDevDatabase(ctx context.Context, cc *pgx.ConnConfig, name string) error {
	admin := cc.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database
			return nil
		}
		return err
	}
	// COMMENT takes no parameters; the mark is a constant without quotes.
	_, err = conn.Exec(ctx, "COMMENT ON DATABASE "+ident+" IS '"+devDatabaseMark+"'")
	return err
}

// mustDatabase is the database name of a constant URL.
func mustDatabase(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	return cfg.Database
}
