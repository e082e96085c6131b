// Command fencedbcli makes one fenced write with the Go SDK's fencedb: the
// other half of the Python SDK's interoperability test
// (python/tests/test_fencedb.py), which writes with one helper and is
// refused by the other on the same database. It is a test tool:
// it must never be shipped or pointed at a database that is not a test's.
//
//	fencedbcli -database-url URL -resource R -token N -owner O
//
// The write appends (resource, token, "go") to fencedb_interop_effects. It
// prints "applied", or "fenced F" with the fence's token F (exit 0), or the
// error (exit 1).
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/fencegate/fencegate/client/fencedb"
)

func main() {
	url := flag.String("database-url", "", "Postgres URL of the worker's database")
	resource := flag.String("resource", "", "the resource written")
	token := flag.Int64("token", 0, "the writer's lease token")
	owner := flag.String("owner", "", "the writer's owner id")
	flag.Parse()
	out, err := write(context.Background(), *url, fencedb.Write{Resource: *resource, Token: *token, Owner: *owner})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(out)
}

func write(ctx context.Context, url string, w fencedb.Write) (string, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return "", err
	}
	defer db.Close()
	if err := fencedb.Migrate(ctx, db); err != nil {
		return "", err
	}
	err = fencedb.Do(ctx, db, w, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO fencedb_interop_effects (resource, token, writer) VALUES ($1, $2, 'go')`,
			w.Resource, w.Token)
		return err
	})
	var fenced *fencedb.FencedError
	if errors.As(err, &fenced) {
		return fmt.Sprintf("fenced %d", fenced.Fence), nil
	}
	if err != nil {
		return "", err
	}
	return "applied", nil
}
