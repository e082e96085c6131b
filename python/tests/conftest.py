"""The Python SDK's tests run against a real gateway.

FENCEGATE_URL names a running one (token FENCEGATE_TOKEN, default the
development token); otherwise the session starts `fencegate dev` on free
ports with its own database on the throwaway Postgres (deploy/dev/pg.sh;
FENCEGATE_TEST_DATABASE_URL names the server), from FENCEGATE_BIN or
`go run ./cmd/fencegate`, with tests/fencegate-dev.yaml (the development
file and a route for every other name). The worker's own database for the fencedb
tests is another one on the same server.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest

import fencegate

REPO = Path(__file__).resolve().parents[2]
DEV_TOKEN = "dev-token"
# The stack's shortest lease (--min-ttl): a handover's budget is drawn from the TTL, and a lease of 100 ms on a
# loaded machine is rightly refused 503 kafka_unavailable (fail closed), which schemathesis would count as a server error.
MIN_TTL_MS = 2_000


@dataclass
class Stack:
    url: str
    token: str
    log: Path | None

    def client(self, owner: str, **kw: object) -> fencegate.Client:
        return fencegate.Client(fencegate.Config(base_url=self.url, token=self.token, owner=owner, **kw))  # type: ignore[arg-type]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_url() -> str:
    """server_url is the throwaway Postgres's URL (FENCEGATE_TEST_DATABASE_URL, or deploy/dev/pg.sh url)."""
    url = os.environ.get("FENCEGATE_TEST_DATABASE_URL")
    if not url:
        url = subprocess.run([str(REPO / "deploy/dev/pg.sh"), "url"], check=True, capture_output=True,
                             text=True).stdout.strip()
    return url


def database_url(name: str) -> str:
    u = urlsplit(server_url())
    return urlunsplit((u.scheme, u.netloc, "/" + name, u.query, u.fragment))


def _wait_ready(url: str, proc: subprocess.Popen[bytes] | None, log: Path | None, limit: float) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"fencegate dev exited {proc.returncode}:\n" + (log.read_text()[-4000:] if log else ""))
        try:
            if httpx.get(url + "/readyz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"fencegate dev at {url} not ready after {limit}s")


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = os.environ.get("FENCEGATE_URL")
    if running:
        yield Stack(running.rstrip("/"), os.environ.get("FENCEGATE_TOKEN", DEV_TOKEN), None)
        return
    listen, kafka, mat = _free_port(), _free_port(), _free_port()
    binary = os.environ.get("FENCEGATE_BIN")
    cmd = [binary] if binary else ["go", "run", "./cmd/fencegate"]
    cmd += ["dev", "--config", str(Path(__file__).with_name("fencegate-dev.yaml")), "--min-ttl", f"{MIN_TTL_MS}ms", "--listen", f"127.0.0.1:{listen}", "--kafka-listen", f"127.0.0.1:{kafka}",
            "--materializer-listen", f"127.0.0.1:{mat}", "--database-url", database_url("fencegate_dev_py")]
    log = tmp_path_factory.mktemp("dev") / "fencegate-dev.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{listen}"
    try:
        _wait_ready(url, proc, log, 300.0)
        yield Stack(url, DEV_TOKEN, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def lease_name() -> str:
    """lease_name is a fresh lease of the development route (shard:*)."""
    return f"shard:{uuid.uuid4().int % 1_000_000_000}"


@pytest.fixture(scope="session")
def worker_db() -> Iterator[str]:
    """worker_db is the URL of the worker's own database, made once and migrated by fencedb."""
    name = "fencegate_py_worker"
    with psycopg.connect(server_url(), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
    yield database_url(name)
