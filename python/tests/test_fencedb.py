"""Fenced writes to the worker's own Postgres: the Python helper and the Go one fence each other on one database."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest

import fencegate
from fencegate import fencedb

REPO = Path(__file__).resolve().parents[2]


def go_write(db: str, resource: str, token: int, owner: str) -> str:
    """go_write makes one fenced write with the Go SDK's fencedb (internal/fencedbcli)."""
    binary = os.environ.get("FENCEDBCLI_BIN")
    cmd = [binary] if binary else ["go", "run", "./internal/fencedbcli"]
    out = subprocess.run(cmd + ["-database-url", db, "-resource", resource, "-token", str(token), "-owner", owner],
                         cwd=REPO, check=True, capture_output=True, text=True, timeout=300)
    return out.stdout.strip()


def py_write(db: str, resource: str, token: int, owner: str) -> str:
    with psycopg.connect(db) as conn:
        try:
            with fencedb.fenced(conn, fencedb.Write(resource, token, owner)) as cur:
                cur.execute("INSERT INTO fencedb_interop_effects (resource, token, writer) VALUES (%s, %s, 'py')",
                            (resource, token))
        except fencedb.Fenced as e:
            return f"fenced {e.fence}"
    return "applied"


@pytest.fixture
def db(worker_db: str) -> str:
    with psycopg.connect(worker_db) as conn:
        fencedb.migrate(conn)
        fencedb.migrate(conn)  # idempotent
        conn.execute("CREATE TABLE IF NOT EXISTS fencedb_interop_effects (resource text, token bigint, writer text)")
        conn.commit()
    return worker_db


def test_schema_is_the_go_helpers() -> None:
    assert fencedb.SCHEMA_SQL == (REPO / "client/fencedb/schema.sql").read_text()


def test_python_and_go_fence_each_other(db: str) -> None:
    r = f"task:{uuid.uuid4()}"
    assert py_write(db, r, 5, "py-w") == "applied"
    assert go_write(db, r, 3, "go-old") == "fenced 5"  # Go refused by Python's fence
    assert go_write(db, r, 5, "go-same") == "applied"  # the same generation passes
    assert go_write(db, r, 9, "go-new") == "applied"
    assert py_write(db, r, 7, "py-old") == "fenced 9"  # Python refused by Go's fence
    with psycopg.connect(db) as conn:
        effects = conn.execute("SELECT token, writer FROM fencedb_interop_effects WHERE resource = %s ORDER BY token",
                               (r,)).fetchall()
        assert effects == [(5, "py"), (5, "go"), (9, "go")]
        receipts = conn.execute("SELECT token, fence_token, owner_id, reason FROM fencegate_refusals "
                                "WHERE resource = %s ORDER BY id", (r,)).fetchall()
        assert receipts == [(3, 5, "go-old", "stale"), (7, 9, "py-old", "stale")]
        fence = conn.execute("SELECT token, owner_id FROM fencegate_fences WHERE resource = %s", (r,)).fetchone()
        assert fence == (9, "go-new")


def test_a_failed_block_rolls_back_the_fence(db: str) -> None:
    r = f"task:{uuid.uuid4()}"
    with psycopg.connect(db) as conn:
        with pytest.raises(RuntimeError):
            with fencedb.fenced(conn, fencedb.Write(r, 4, "py")) as cur:
                cur.execute("INSERT INTO fencedb_interop_effects (resource, token, writer) VALUES (%s, 4, 'py')", (r,))
                raise RuntimeError("the worker's own failure")
        row = conn.execute("SELECT token FROM fencegate_fences WHERE resource = %s", (r,)).fetchone()
        assert row is None  # the fence did not advance: nothing of the write is committed
    assert go_write(db, r, 2, "go") == "applied"


def test_check_refuses_no_resource_or_token(db: str) -> None:
    with psycopg.connect(db) as conn:
        with pytest.raises(fencegate.FencegateError):
            with fencedb.fenced(conn, fencedb.Write("", 1)):
                pass
        with pytest.raises(fencegate.FencegateError):
            with fencedb.fenced(conn, fencedb.Write("r", 0)):
                pass
