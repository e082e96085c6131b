"""Fenced writes to the worker's own Postgres with psycopg 3: the twin of the Go SDK's client/fencedb.

A write of a generation that a later generation has already overtaken on
the same resource is refused inside the caller's own transaction and
leaves a receipt. Same tables (schema.sql is client/fencedb/schema.sql,
byte for byte), same statements, same receipts: a Go worker and a Python
worker fence each other on one database.

    with psycopg.connect(url) as conn:
        fencedb.migrate(conn)
        try:
            with fencedb.fenced(conn, fencedb.Write("task:42", lease.token, "indexer-17")) as cur:
                cur.execute("UPDATE tasks SET done = true WHERE id = 42")
        except fencedb.Fenced as e:
            ...  # a later generation wrote task:42; the refusal is in fencegate_refusals

The rule, in one place (check): a token below the resource's fence is
refused; above it advances the fence; equal passes (the same generation).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Iterator

import psycopg

from .errors import FencegateError

SCHEMA_SQL = resources.files(__package__).joinpath("schema.sql").read_text()
"""SCHEMA_SQL makes fencedb's tables (Postgres); every statement is idempotent."""

# The statements of client/fencedb/fencedb.go, placeholders aside.
_ENSURE = "INSERT INTO fencegate_fences (resource, token) VALUES (%s, 0) ON CONFLICT (resource) DO NOTHING"
_LOCK = "SELECT token FROM fencegate_fences WHERE resource = %s FOR UPDATE"
_ADVANCE = ("UPDATE fencegate_fences SET token = %s, owner_id = %s, updated_at = clock_timestamp() "
            "WHERE resource = %s AND token < %s")
_RECEIPT = ("INSERT INTO fencegate_refusals (resource, token, fence_token, owner_id, reason) "
            "VALUES (%s, %s, %s, %s, 'stale')")


def migrate(conn: psycopg.Connection[Any]) -> None:
    """migrate applies SCHEMA_SQL to conn's database and commits."""
    with conn.transaction():
        conn.execute(SCHEMA_SQL.encode())


@dataclass(frozen=True)
class Write:
    """Write names the resource a write touches and the generation (lease token, owner) writing it."""

    resource: str
    token: int
    owner: str = ""


class Fenced(FencegateError):
    """Fenced: a later generation (fence) has written the resource; the refusal has a receipt."""

    def __init__(self, resource: str, token: int, fence: int, owner: str) -> None:
        self.resource, self.token, self.fence, self.owner = resource, token, fence, owner
        super().__init__(f"fencedb: {resource!r} refused token {token}: a later generation (token {fence}) wrote it")


def check(cur: psycopg.Cursor[Any], w: Write) -> None:
    """check is the fence, inside the caller's transaction: first in it, before any write.

    Below the fence it files a receipt and raises Fenced (the caller
    commits the receipt alone); at or above, it advances the fence.
    """
    if not w.resource or w.token <= 0:
        raise FencegateError(f"fencedb: a write needs a resource and a positive token (got {w.resource!r}, {w.token})")
    cur.execute(_ENSURE, (w.resource,))
    row = cur.execute(_LOCK, (w.resource,)).fetchone()
    if row is None:
        raise FencegateError(f"fencedb: no fence row for {w.resource!r}")
    fence = int(row[0])
    if w.token < fence:
        cur.execute(_RECEIPT, (w.resource, w.token, fence, w.owner))
        raise Fenced(w.resource, w.token, fence, w.owner)
    if w.token > fence:
        cur.execute(_ADVANCE, (w.token, w.owner, w.resource, w.token))


@contextlib.contextmanager
def fenced(conn: psycopg.Connection[Any], w: Write) -> Iterator[psycopg.Cursor[Any]]:
    """fenced runs the with block in a transaction of its own on conn, fenced by w.

    A refused write commits its receipt alone and raises Fenced (the block
    does not run); an exception of the block rolls everything back, the
    fence's advance included.
    """
    refused: Fenced | None = None
    with conn.transaction():
        cur = conn.cursor()
        try:
            check(cur, w)
        except Fenced as e:
            refused = e
        if refused is None:
            yield cur
    if refused is not None:
        raise refused
