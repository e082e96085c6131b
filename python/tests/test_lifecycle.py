"""A worker's life against the real gateway: acquire, produce, takeover, loss, refused write, resume, release."""

from __future__ import annotations

import threading
import time

import httpx
import psycopg
import pytest

import fencegate
from fencegate import fencedb

from conftest import Stack

FAST = {"ttl": 2.0, "min_backoff": 0.02, "max_backoff": 0.2}


class Partition(httpx.HTTPTransport):
    """Partition is the real transport with the worker's renewals cut off once frozen: a paused or partitioned
    worker, which the real network cannot be made into on demand. Everything else goes through."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = threading.Event()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.frozen.is_set() and request.method == "PATCH":
            raise httpx.ConnectError("partitioned from the gateway", request=request)
        return super().handle_request(request)


def test_acquire_produce_release(stack: Stack, lease_name: str) -> None:
    with stack.client("py-w1") as c:
        lease = c.acquire(lease_name, timeout=30)
        assert lease.token > 0
        res = lease.produce("b-1", [fencegate.Record(key=b"k", value=b"v", headers={"h": "1"})], timeout=30)
        again = lease.produce("b-1", [fencegate.Record(key=b"k", value=b"v", headers={"h": "1"})], timeout=30)
        assert res.offsets and again.offsets == res.offsets  # the retry is answered with the original offsets
        lease.release(timeout=10)
        assert lease.lost.is_set() and isinstance(lease.err, fencegate.LeaseLost)
        assert isinstance(lease.err.cause, fencegate.Released)
        with pytest.raises(fencegate.LeaseLost):
            lease.produce("b-2", [fencegate.Record(value=b"late")])
        # Released: another owner takes it at once, no TTL wait.
        with stack.client("py-w2") as c2:
            assert c2.acquire(lease_name, timeout=30).token > lease.token


def test_takeover_loss_signal_refused_write_and_resume(stack: Stack, lease_name: str, worker_db: str) -> None:
    """The first worker is frozen past its TTL, the second takes over; the first sees the loss, its Kafka batch
    and its database write are refused, and the second resumes from the first's checkpoint, typed as written."""
    resource = "task:" + lease_name
    cut = Partition()
    c1 = stack.client("py-first", transport=cut, **FAST)
    c2 = stack.client("py-second", **FAST)
    try:
        first = c1.acquire(lease_name, timeout=30)
        called: list[fencegate.LeaseLost] = []
        first.on_lost(called.append)
        first.produce("in-0", [fencegate.Record(value=b"doc-0")], checkpoint={"next": 1, "cursor": "abc"}, timeout=30)
        with psycopg.connect(worker_db) as db:
            fencedb.migrate(db)
            with fencedb.fenced(db, fencedb.Write(resource, first.token, "py-first")) as cur:
                cur.execute("SELECT 1")
        cut.frozen.set()  # the first worker's renewals no longer get through
        second = c2.acquire_wait(lease_name, timeout=30)
        assert second.token > first.token
        cp = second.checkpoint(timeout=30)
        assert cp is not None and cp.type == "JSON" and cp.value == {"next": 1, "cursor": "abc"}
        assert cp.batch_id == "in-0" and cp.owner_id == "py-first"
        with psycopg.connect(worker_db) as db:
            with fencedb.fenced(db, fencedb.Write(resource, second.token, "py-second")) as cur:
                cur.execute("SELECT 1")
        # The first worker's loss signal: its watch stream tells it, or its local deadline does.
        assert first.lost.wait(10), "the first worker was never told of its loss"
        assert called and called[0] is first.err
        with pytest.raises(fencegate.LeaseLost):
            first.produce("in-1", [fencegate.Record(value=b"stale")], timeout=10)
        with psycopg.connect(worker_db) as db:
            with pytest.raises(fencedb.Fenced) as refused:
                with fencedb.fenced(db, fencedb.Write(resource, first.token, "py-first")) as cur:
                    cur.execute("SELECT 1")
            assert refused.value.fence == second.token
            n = db.execute("SELECT count(*) FROM fencegate_refusals WHERE resource = %s AND token = %s",
                           (resource, first.token)).fetchone()
            assert n is not None and n[0] == 1
        res = second.produce("in-1", [fencegate.Record(value=b"doc-1")], checkpoint={"next": 2}, timeout=30)
        assert res.token == second.token
        second.release(timeout=10)
    finally:
        c1.close(timeout=5)
        c2.close(timeout=5)


@pytest.mark.parametrize("written", [b"\x00\xffbin", "text", {"next": 3, "done": ["a"]}, [1, 2], 42,
                                     fencegate.Json("a JSON string")])
def test_checkpoint_reads_back_as_written(stack: Stack, lease_name: str, written: object) -> None:
    with stack.client("py-cp") as c:
        lease = c.acquire(lease_name, timeout=30)
        lease.produce("b-1", [fencegate.Record(value=b"v")], checkpoint=written, timeout=30)
        lease.release(timeout=10)
        again = c.acquire(lease_name, timeout=30)
        cp = again.checkpoint(timeout=30)
        want = written.data if isinstance(written, fencegate.Json) else written
        assert cp is not None and cp.value == want and type(cp.value) is type(want)


def test_run_supervises_takeover_and_resume(stack: Stack, lease_name: str) -> None:
    """fencegate.run: the step writes only its work; a takeover mid-way makes run start over from the checkpoint."""
    docs = [f"doc-{i}" for i in range(6)]
    seen: list[tuple[int, int]] = []  # (token, resume position)
    taken = threading.Event()
    cut = Partition()
    c = stack.client("py-run", transport=cut, **FAST)
    thief = stack.client("py-thief", **FAST)

    def step(s: fencegate.Step) -> int:
        nxt = 0 if s.resume is None else int(s.resume["next"])
        seen.append((s.lease.token, nxt))
        for i in range(nxt, len(docs)):
            if i == 3 and not taken.is_set():
                # Another worker takes the lease over (this one is frozen: its renewals stop).
                cut.frozen.set()
                stolen = thief.acquire_wait(lease_name, timeout=30)
                stolen.release(timeout=10)
                taken.set()
                assert s.lost.wait(10)
                cut.frozen.clear()
            s.produce(f"b-{i}", [fencegate.Record(value=docs[i])], checkpoint={"next": i + 1}, timeout=30)
        return len(docs)

    try:
        assert fencegate.run(c, lease_name, step, ttl=2.0) == len(docs)
    finally:
        c.close(timeout=5)
        thief.close(timeout=5)
    assert [pos for _, pos in seen] == [0, 3]
    assert seen[1][0] > seen[0][0]


def test_watch_resumes_from_the_last_event_id(stack: Stack, lease_name: str) -> None:
    with stack.client("py-watch", disable_watch=True) as c:
        lease = c.acquire(lease_name, timeout=30)
        lease.release(timeout=10)
        events: list[fencegate.Event] = []
        stop = threading.Event()

        def fn(e: fencegate.Event) -> None:
            events.append(e)
            if e.kind == "released":
                stop.set()

        t = threading.Thread(target=c.watch, args=(lease_name, 0, fn, stop), daemon=True)
        t.start()
        t.join(20)
        assert events[0].kind == "acquired" and events[-1].kind == "released"
        later: list[fencegate.Event] = []
        stop2 = threading.Event()
        def fn2(e: fencegate.Event) -> None:
            later.append(e)
            stop2.set()

        t2 = threading.Thread(target=c.watch, args=(lease_name, events[0].id, fn2, stop2), daemon=True)
        t2.start()
        t2.join(20)
        assert later and later[0].id == events[1].id


def test_hooks_see_the_lease_life(stack: Stack, lease_name: str) -> None:
    class Counts(fencegate.Hooks):
        def __init__(self) -> None:
            self.n: dict[str, int] = {}

        def bump(self, k: str) -> None:
            self.n[k] = self.n.get(k, 0) + 1

        def on_acquired(self, lease: fencegate.Lease, latency: float) -> None:
            self.bump("acquired")

        def on_produced(self, lease: fencegate.Lease, batch_id: str, outcome: fencegate.Outcome, latency: float,
                        err: BaseException | None) -> None:
            self.bump(outcome.value)

        def on_released(self, lease: fencegate.Lease, err: BaseException | None) -> None:
            self.bump("released")

    counts = Counts()
    with stack.client("py-hooks", hooks=[counts]) as c:
        lease = c.acquire(lease_name, timeout=30)
        lease.produce("b-1", [fencegate.Record(value=b"v")], timeout=30)
        with pytest.raises(fencegate.InvalidRequestProblem) as bad:
            lease.produce("b-2", [fencegate.Record(value=b"v", headers={"fencegate-x": "1"})], timeout=30)
        assert bad.value.code == "invalid_request" and bad.value.status == 400
        lease.release(timeout=10)
    assert counts.n == {"acquired": 1, "committed": 1, "refused": 1, "released": 1}


def test_lease_held_and_acquire_wait(stack: Stack, lease_name: str) -> None:
    with stack.client("py-a", **FAST) as a, stack.client("py-b", **FAST) as b:
        held = a.acquire(lease_name, timeout=30)
        with pytest.raises(fencegate.LeaseHeldProblem) as e:
            b.acquire(lease_name, timeout=30)
        assert e.value.holder_owner_id == "py-a"
        with pytest.raises(fencegate.Timeout) as t:
            b.acquire_wait(lease_name, timeout=0.5)
        assert t.value.code == "lease_held"
        threading.Timer(0.3, lambda: held.release(timeout=10)).start()
        start = time.monotonic()
        got = b.acquire_wait(lease_name, timeout=30)
        assert got.token > held.token and time.monotonic() - start < 10


def test_guard_raises_in_the_block_on_loss(stack: Stack, lease_name: str) -> None:
    cut = Partition()
    with stack.client("py-guard", transport=cut, ttl=2.0, min_backoff=0.02, max_backoff=0.1) as c:
        lease = c.acquire(lease_name, timeout=30)
        cut.frozen.set()  # renewals no longer get through: lost at the local deadline
        start = time.monotonic()
        with pytest.raises(fencegate.LeaseLost):
            with lease.guard():
                while time.monotonic() - start < 30:  # the worker's long step, never looking at the lease
                    sum(range(1000))
        assert time.monotonic() - start < 10


def test_outcome_unknown_is_settled_by_the_next_checkpoint(stack: Stack, lease_name: str) -> None:
    """A batch lands, its answer is lost and then the gateway is unreachable until the lease is lost: produce raises
    LeaseLost marked outcome_unknown; a later batch refused by the lost lease is not marked; the checkpoint read by
    the owner's next generation says the batch landed."""

    class Blackout(Partition):
        def __init__(self) -> None:
            super().__init__()
            self.dark = threading.Event()

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if self.dark.is_set():
                raise httpx.ConnectError("the gateway is unreachable", request=request)
            resp = super().handle_request(request)
            if request.method == "POST" and request.url.path.endswith("/records") and self.frozen.is_set():
                self.dark.set()  # the batch landed; its answer is lost, and so is everything after it
                resp.close()
                raise httpx.ReadError("connection reset", request=request)
            return resp

    cut = Blackout()
    with stack.client("py-unknown", transport=cut, ttl=2.0, min_backoff=0.02, max_backoff=0.1,
                      disable_watch=True) as c:
        lease = c.acquire(lease_name, timeout=30)
        lease.produce("b-0", [fencegate.Record(value=b"v0")], checkpoint={"next": 1}, timeout=10)
        cut.frozen.set()
        with pytest.raises(fencegate.LeaseLost) as first:
            lease.produce("b-1", [fencegate.Record(value=b"v1")], checkpoint={"next": 2})
        assert first.value.outcome_unknown and fencegate.outcome_unknown(first.value)
        with pytest.raises(fencegate.LeaseLost) as later:
            lease.produce("b-2", [fencegate.Record(value=b"v2")], timeout=10)
        assert not later.value.outcome_unknown  # never sent: the lease was lost before
    with stack.client("py-unknown") as again:
        cp = again.acquire_wait(lease_name, timeout=30).checkpoint(timeout=30)
        assert fencegate.committed(cp, "b-1") and cp is not None and cp.value == {"next": 2}
