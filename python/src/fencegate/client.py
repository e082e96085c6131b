"""The fencegate client: acquire a lease, keep it renewed, produce batches, release.

The behaviour is the Go SDK's (client/ in the repository), point by
point; see the package README for what a worker may rely on. Calls take
``timeout`` (seconds; None retries what may succeed later for as long as
it fails, as Go's context.Background() does) in place of a context.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence
from urllib.parse import quote, urlencode

import httpx

from ._holders import HolderPolicy
from ._types import (Checkpoint, Grant, Hooks, Record, Result, checkpoint_from_reply, encode_value, parse_time)
from .errors import (Closed, DeadlinePassed, Event, FencegateError, HolderNotAllowed, LeaseLost, NoticeLost,
                     Outcome, Problem, Reaction, Released, problem_from_reply, produce_outcome, reaction_to)

DEFAULT_TTL = 10.0
"""DEFAULT_TTL is a lease's TTL in seconds when neither Config.ttl nor acquire's ttl says otherwise."""
DEFAULT_MIN_BACKOFF = 0.05
"""DEFAULT_MIN_BACKOFF and DEFAULT_MAX_BACKOFF bound the wait before a retry, in seconds."""
DEFAULT_MAX_BACKOFF = 2.0
DEFAULT_HTTP_TIMEOUT = 30.0
"""DEFAULT_HTTP_TIMEOUT bounds one request, in seconds."""
DEFAULT_CHECKPOINT_WAIT = 5.0
"""DEFAULT_CHECKPOINT_WAIT is how long one checkpoint read asks the gateway to wait for the ledger."""
WATCH_IDLE = 60.0
"""WATCH_IDLE is how long a watch stream may stay silent before it is opened again."""

_log = logging.getLogger("fencegate")
_log.addHandler(logging.NullHandler())


def default_renew_every(ttl: float) -> float:
    """default_renew_every is three renewals per TTL, so that two may fail."""
    return ttl / 3


def _check_timing(ttl: float, renew_every: float) -> None:
    if ttl < 0.001:
        raise FencegateError("fencegate: ttl must be at least 1ms")
    if renew_every <= 0 or renew_every >= ttl:
        raise FencegateError("fencegate: renew_every must be positive and shorter than ttl")


@dataclass
class Config:
    """Config of a Client; Client() refuses one it cannot work with.

    base_url is a load balancer or one replica (http:// or https://, a
    host, maybe a path); token the bearer token alone; owner the worker's
    stable owner id (batch ids are scoped to it). Times are seconds.
    """

    base_url: str
    token: str
    owner: str
    ttl: float = DEFAULT_TTL
    renew_every: float | None = None  # None: ttl/3
    min_backoff: float = DEFAULT_MIN_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF
    http_timeout: float = DEFAULT_HTTP_TIMEOUT
    holder_hosts: list[str] | None = None  # None: base_url's host and its parent domain's hosts
    logger: logging.Logger | None = None  # None: the "fencegate" logger
    hooks: Sequence[Hooks] = ()
    disable_watch: bool = False
    transport: httpx.BaseTransport | None = field(default=None, repr=False)


def backoff(n: int, min_wait: float, max_wait: float, retry_after: float = 0.0) -> float:
    """backoff is the wait before retry n (1, 2, ...): doubling, the upper half jittered, at least retry_after."""
    d = min_wait
    for _ in range(1, n):
        if d >= max_wait:
            break
        d *= 2
    d = min(d, max_wait)
    return max(d / 2 + random.uniform(0, d / 2), retry_after)


class _Deadline:
    """_Deadline is the end of one call (timeout None: none), and the event that ends it early."""

    def __init__(self, timeout: float | None, stop: threading.Event | None = None) -> None:
        self.at = None if timeout is None else time.monotonic() + timeout
        self.stop = stop

    def left(self) -> float | None:
        return None if self.at is None else self.at - time.monotonic()

    def ended(self) -> bool:
        left = self.left()
        return (left is not None and left <= 0) or (self.stop is not None and self.stop.is_set())

    def sleep(self, d: float) -> None:
        left = self.left()
        d = d if left is None else max(0.0, min(d, left))
        if self.stop is not None:
            self.stop.wait(d)
        else:
            time.sleep(d)


class Timeout(FencegateError):
    """Timeout: a call's timeout ended it; ``last`` is the last answer before (a Problem, or None)."""

    def __init__(self, what: str, last: BaseException | None) -> None:
        self.last = last
        self.code = last.code if isinstance(last, Problem) else ""
        suffix = f" (last answer: {str(last).removeprefix('fencegate: ')})" if last else ""
        super().__init__(f"fencegate: {what}: timed out{suffix}")


class Client:
    """Client talks to a gateway; it is safe to share between threads. close() releases its leases."""

    def __init__(self, config: Config) -> None:
        cfg = dataclasses.replace(config)
        if not cfg.base_url or not cfg.token or not cfg.owner:
            raise FencegateError("fencegate: base_url, token and owner are required")
        if any(c <= " " or c == "\x7f" for c in cfg.token):
            raise FencegateError('fencegate: token must be the bearer token alone: no "Bearer " prefix, '
                                 "spaces or control characters")
        cfg.base_url = cfg.base_url.rstrip("/")
        if cfg.renew_every is None:
            cfg.renew_every = default_renew_every(cfg.ttl)
        _check_timing(cfg.ttl, cfg.renew_every)
        if cfg.min_backoff <= 0 or cfg.max_backoff < cfg.min_backoff:
            raise FencegateError("fencegate: min_backoff must be positive and at most max_backoff")
        for i, h in enumerate(cfg.hooks):
            if not isinstance(h, Hooks):
                raise FencegateError(f"fencegate: hooks[{i}] ({type(h).__name__}) is not a fencegate.Hooks")
        self.holders = HolderPolicy(cfg.base_url, cfg.holder_hosts)
        self.cfg = cfg
        self.log = cfg.logger or _log
        self._http = httpx.Client(timeout=cfg.http_timeout, transport=cfg.transport)
        self._closed = threading.Event()
        self._mu = threading.Lock()
        self._leases: set[Lease] = set()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(timeout=5.0)

    # ---- requests

    def _call(self, base: str, method: str, path: str, body: Any, deadline: _Deadline,
              cap: float | None = None) -> Any:
        """_call sends one request; an error reply raises its Problem, no reply an httpx error."""
        timeout = self.cfg.http_timeout
        for bound in (deadline.left(), cap):
            if bound is not None:
                timeout = max(0.001, min(timeout, bound))
        headers = {"Authorization": "Bearer " + self.cfg.token}
        content = None
        if body is not None:
            content = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        resp = self._http.request(method, base + path, content=content, headers=headers, timeout=timeout)
        if resp.status_code >= 300:
            p = problem_from_reply(resp.status_code, resp.content, _retry_after(resp.headers))
            if p.holder_url:
                try:
                    self.holders.allow(p.holder_url)
                except HolderNotAllowed as e:
                    raise HolderNotAllowed(f"{e} (answer: {str(p).removeprefix('fencegate: ')})") from p
            raise p
        return resp.json() if resp.content else None

    def _backoff(self, n: int, err: BaseException | None) -> float:
        ra = err.retry_after if isinstance(err, Problem) else 0.0
        return backoff(n, self.cfg.min_backoff, self.cfg.max_backoff, ra)

    def _grant(self, base: str, name: str, token: int, ttl: float, deadline: _Deadline) -> tuple[Grant, float]:
        start = time.monotonic()
        body: dict[str, Any] = {"name": name, "owner_id": self.cfg.owner, "ttl_ms": int(ttl * 1000)}
        if token > 0:
            body["token"] = token
        return Grant.from_json(self._call(base, "POST", "/v1/leases", body, deadline)), start

    def _each(self, f: Callable[[Hooks], None]) -> None:
        for h in self.cfg.hooks:
            try:
                f(h)
            except Exception:  # a hook must never stop a renewal
                self.log.warning("hook failed", exc_info=True)

    # ---- acquire

    def acquire(self, name: str, *, ttl: float | None = None, renew_every: float | None = None,
                timeout: float | None = None) -> Lease:
        """acquire takes lease name and keeps it renewed in a background thread until release, close or loss.

        Answers that granted nothing (draining, 429, 5xx, transport errors)
        are retried with backoff until timeout; lease_held and the other
        refusals raise at once (LeaseHeldProblem: use acquire_wait).
        """
        return self._acquire(name, ttl, renew_every, timeout, wait=False)

    def acquire_wait(self, name: str, *, ttl: float | None = None, renew_every: float | None = None,
                     timeout: float | None = None) -> Lease:
        """acquire_wait is acquire that also waits while another owner holds the lease (lease_held)."""
        return self._acquire(name, ttl, renew_every, timeout, wait=True)

    def _settings(self, ttl: float | None, renew_every: float | None) -> tuple[float, float]:
        if ttl is None:
            ttl, renew_every = self.cfg.ttl, renew_every or self.cfg.renew_every
        renew_every = renew_every or default_renew_every(ttl)
        _check_timing(ttl, renew_every)
        return ttl, renew_every

    def _acquire(self, name: str, ttl: float | None, renew_every: float | None, timeout: float | None,
                 wait: bool) -> Lease:
        ttl, renew_every = self._settings(ttl, renew_every)
        if self._closed.is_set():
            raise Closed(f"fencegate: acquire {name}: client closed")
        begun = time.monotonic()
        deadline = _Deadline(timeout, self._closed)
        last: BaseException | None = None
        n = 0
        while True:
            n += 1
            if self._closed.is_set():
                raise Closed(f"fencegate: acquire {name}: client closed")
            if deadline.ended():
                raise Timeout(f"acquire {name}", last)
            try:
                g, start = self._grant(self.cfg.base_url, name, 0, ttl, deadline)
            except (Problem, HolderNotAllowed, httpx.HTTPError) as e:
                last = e
                r = reaction_to(e)
                if r is Reaction.HELD and wait:
                    self.log.debug("waiting for a held lease", extra={"lease": name, "attempt": n})
                elif r is Reaction.RETRY:
                    self.log.warning("acquire %s failed, retrying: %s", name, e)
                else:
                    raise
                deadline.sleep(self._backoff(n, e))
                continue
            return self._begin(name, ttl, renew_every, g, start, begun)

    def _begin(self, name: str, ttl: float, renew_every: float, g: Grant, start: float, begun: float) -> Lease:
        lease = Lease(self, name, ttl, renew_every, g, start)
        with self._mu:
            if self._closed.is_set():
                lease._done.set()
                try:
                    lease.release(timeout=ttl)
                except FencegateError:
                    pass
                raise Closed(f"fencegate: acquire {name}: client closed")
            self._leases.add(lease)
        lease._start()
        latency = time.monotonic() - begun
        self.log.info("lease %s acquired, token %d", name, g.token)
        self._each(lambda h: h.on_acquired(lease, latency))
        return lease

    def _forget(self, lease: Lease) -> None:
        with self._mu:
            self._leases.discard(lease)

    def close(self, timeout: float | None = None) -> None:
        """close releases every lease the client holds and stops their renewals; acquires raise Closed after it.

        timeout bounds the releases only; a lease not released expires at the gateway after its TTL.
        """
        with self._mu:
            first = not self._closed.is_set()
            self._closed.set()
            leases = list(self._leases)
        if not first:
            return
        errs: list[BaseException] = []
        threads = []
        for lease in leases:
            def rel(lease: Lease = lease) -> None:
                try:
                    lease.release(timeout=timeout)
                except FencegateError as e:
                    if isinstance(lease.err, LeaseLost) and isinstance(lease.err.cause, Released):
                        errs.append(e)
                except httpx.HTTPError as e:
                    errs.append(e)
            t = threading.Thread(target=rel, daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        self._http.close()
        if errs:
            raise FencegateError("fencegate: close: " + "; ".join(str(e) for e in errs))

    # ---- watch

    def watch(self, prefix: str, after: int, fn: Callable[[Event], None], stop: threading.Event) -> None:
        """watch calls fn for each event of the leases under prefix, in id order, each once, until stop is set.

        after resumes after that event id (-1: from now); a broken stream is
        opened again with Last-Event-ID after a backoff; a refusal raises its Problem.
        """
        self._watch("/v1/events?" + urlencode({"prefix": prefix}), after, fn, stop)

    def _watch(self, path: str, after: int, fn: Callable[[Event], None], stop: threading.Event,
               on_open: Callable[[httpx.Response], None] | None = None) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            err: BaseException | None = None
            try:
                after = self._stream(path, after, fn, stop, on_open)
                n = 0  # a stream that ended cleanly (a drain): reopen at once
            except Problem as p:
                if p.status != 429 and p.status < 500:
                    raise
                err = p
            except (httpx.HTTPError, ValueError) as e:
                err = e
            if stop.is_set():
                return
            self.log.debug("watch stream %s broken, reopening after %d: %s", path, after, err)
            if n > 0:
                stop.wait(self._backoff(n, err))

    def _stream(self, path: str, after: int, fn: Callable[[Event], None], stop: threading.Event,
                on_open: Callable[[httpx.Response], None] | None) -> int:
        headers = {"Authorization": "Bearer " + self.cfg.token, "Accept": "text/event-stream"}
        if after >= 0:
            headers["Last-Event-ID"] = str(after)
        timeout = httpx.Timeout(self.cfg.http_timeout, read=WATCH_IDLE)
        with self._http.stream("GET", self.cfg.base_url + path, headers=headers, timeout=timeout) as resp:
            if resp.status_code != 200:
                raise problem_from_reply(resp.status_code, resp.read(), _retry_after(resp.headers))
            if on_open is not None:
                on_open(resp)
            for e in read_events(resp.iter_lines()):
                if stop.is_set():
                    break
                if e.id <= after:
                    continue
                after = e.id
                fn(e)
        return after

    # ---- supervised run

    def run(self, name: str, step: Callable[[Any], Any], *, stop: threading.Event | None = None,
            ttl: float | None = None, max_losses: int | None = None) -> Any:
        """run is the supervised loop of fencegate.run (see there)."""
        from .run import run
        return run(self, name, step, stop=stop, ttl=ttl, max_losses=max_losses)


def _retry_after(h: Mapping[str, str]) -> float:
    try:
        n = int(h.get("Retry-After", ""))
    except ValueError:
        return 0.0
    return float(n) if n >= 0 else 0.0


def read_events(lines: Iterator[str]) -> Iterator[Event]:
    """read_events parses Server-Sent Events: one Event per event with data."""
    data = ""
    for line in lines:
        if line.startswith("data:"):
            data = line[5:].strip()
        elif line == "" and data:
            d = json.loads(data)
            data = ""
            yield Event(id=int(d.get("id", 0)), name=str(d.get("name", "")), kind=str(d.get("kind", "")),
                        owner_id=str(d.get("owner_id", "")), token=int(d.get("token", 0) or 0),
                        holder=str(d.get("holder", "")), at=str(d.get("at", "")), raw=d)


class _Interrupt(LeaseLost):
    """_Interrupt is raised inside a Lease.guard() block when the lease is lost."""

    def __init__(self, cause: BaseException | None = None) -> None:
        super().__init__(cause or DeadlinePassed("fencegate: lease lost"))


class Lease:
    """Lease is an acquired lease, renewed in a background thread until release, close or loss.

    ``lost`` (a threading.Event) is set once the lease can no longer
    write; ``err`` says why: a LeaseLost whose cause is a Problem
    (lease_lost with its reason, fenced), DeadlinePassed, Released or
    NoticeLost. on_lost(fn) calls fn then; guard() raises in a with block.
    """

    def __init__(self, c: Client, name: str, ttl: float, renew_every: float, g: Grant, start: float) -> None:
        self._c = c
        self.name = name
        self.ttl = ttl
        self.renew_every = renew_every
        self._regen = threading.Lock()  # one new generation at a time
        self._mu = threading.Lock()
        self._base = c.cfg.base_url
        self._grant = g
        self._deadline = start + ttl
        self._renew_err: BaseException | None = None
        self._err: LeaseLost | None = None
        self.lost = threading.Event()
        self._stop = threading.Event()  # set when release begins
        self._wake = threading.Event()  # wakes the renewer: stop or loss
        self._done = threading.Event()  # set when the renewer stopped
        self._callbacks: list[Callable[[LeaseLost], None]] = []
        self._watch_resp: httpx.Response | None = None

    def _start(self) -> None:
        threading.Thread(target=self._renew_loop, name=f"fencegate-renew-{self.name}", daemon=True).start()
        if not self._c.cfg.disable_watch:
            threading.Thread(target=self._watch_loop, name=f"fencegate-watch-{self.name}", daemon=True).start()

    # ---- state

    @property
    def grant(self) -> Grant:
        """grant is the current generation; it changes when the SDK asks for a new one."""
        with self._mu:
            return self._grant

    @property
    def token(self) -> int:
        """token is the current generation's token (grant.token)."""
        return self.grant.token

    @property
    def deadline(self) -> float:
        """deadline is the local deadline (time.monotonic()): the last successful renewal's start plus the TTL."""
        with self._mu:
            return self._deadline

    @property
    def err(self) -> LeaseLost | None:
        """err is None while the lease may write, else the LeaseLost saying why."""
        with self._mu:
            return self._err

    def on_lost(self, fn: Callable[[LeaseLost], None]) -> None:
        """on_lost calls fn(err) once when the lease is lost (at once if it already is), on the losing thread."""
        with self._mu:
            err = self._err
            if err is None:
                self._callbacks.append(fn)
                return
        fn(err)

    def guard(self) -> _Guard:
        """guard is a context manager that raises LeaseLost in its block the moment the lease is lost.

        The exception arrives at the next Python bytecode of the thread that
        entered the block (a blocking call, such as a socket read, finishes
        first); it is raised at the block's end too if the lease was lost.
        """
        return _Guard(self)

    def _lose_locked(self, cause: BaseException) -> LeaseLost:
        if self._err is None:
            self._err = LeaseLost(cause)
            self.lost.set()
            self._wake.set()
        return self._err

    def _fire_lost(self) -> None:
        with self._mu:
            err, callbacks, self._callbacks = self._err, self._callbacks, []
        if err is None:
            return
        for fn in callbacks:
            try:
                fn(err)
            except Exception:
                self._c.log.warning("on_lost callback failed", exc_info=True)

    def _lose(self, token: int, cause: BaseException) -> LeaseLost | None:
        with self._mu:
            if self._err is None and self._grant.token != token:
                return None  # our own new generation superseded token: not a loss
            err = self._lose_locked(cause)
        self._fire_lost()
        return err

    def _lose_unless_moved(self, token: int, cause: BaseException) -> LeaseLost | None:
        with self._regen:
            return self._lose(token, cause)

    def _check(self) -> tuple[int, str]:
        """_check returns the token and address if the lease may still write; past the deadline it is lost."""
        with self._mu:
            if self._err is None and time.monotonic() >= self._deadline:
                last = f" (last renewal: {self._renew_err})" if self._renew_err else ""
                self._lose_locked(DeadlinePassed("fencegate: local deadline passed" + last))
            err = self._err
            if err is None:
                return self._grant.token, self._base
        self._fire_lost()
        raise err

    def _extend(self, start: float) -> None:
        with self._mu:
            self._deadline = max(self._deadline, start + self.ttl)
            self._renew_err = None

    def _follow(self, err: BaseException) -> None:
        if isinstance(err, Problem) and err.holder_url:
            with self._mu:
                self._base = err.holder_url

    def _rehome(self, base: str, err: BaseException) -> None:
        if isinstance(err, Problem) and err.code != "draining":
            return
        with self._mu:
            if self._base == base:
                self._base = self._c.cfg.base_url

    def _regenerate(self, token: int, deadline: _Deadline) -> None:
        """_regenerate asks for a new generation with token (refused: not_holder, generation_ended)."""
        with self._regen:
            cur, base = self._check()
            if cur != token:
                return
            try:
                g, start = self._c._grant(base, self.name, token, self.ttl, deadline)
            except (Problem, HolderNotAllowed, httpx.HTTPError) as e:
                r = reaction_to(e)
                if r in (Reaction.LOST, Reaction.HELD):
                    lerr = self._lose(token, e)
                    if lerr is not None:
                        raise lerr from e
                if r is Reaction.RETRY:
                    self._rehome(base, e)
                raise
            with self._mu:
                self._grant = g
            self._extend(start)
            self._c.log.info("lease %s: new generation %d (was %d)", self.name, g.token, token)

    # ---- renewal

    def _renew_loop(self) -> None:
        failures, wait = 0, self.renew_every
        try:
            while True:
                if self._wake.wait(wait):
                    return
                err = self._renew_once(None)
                if self.err is not None:
                    return
                if err is None:
                    failures, wait = 0, self.renew_every
                else:
                    failures += 1
                    wait = self._c._backoff(failures, err)
                wait = max(0.0, min(wait, self.deadline - time.monotonic()))
        finally:
            self._stopped()

    def _stopped(self) -> None:
        err = self.err
        self._done.set()
        self._c._forget(self)
        if err is None or isinstance(err.cause, Released):
            return
        self._c.log.warning("lease %s lost: %s", self.name, err)
        self._c._each(lambda h: h.on_lost(self, err))

    def renew(self, timeout: float | None = None) -> None:
        """renew renews the lease now, as the background renewal does; LeaseLost when it is lost."""
        err = self._renew_once(timeout)
        if err is not None:
            raise err

    def _renew_once(self, timeout: float | None) -> BaseException | None:
        start = time.monotonic()
        err: BaseException | None = None
        try:
            self._renew(_Deadline(timeout, self._stop))
        except (FencegateError, httpx.HTTPError) as e:
            err = e
        latency = time.monotonic() - start
        if err is not None and self._stop.is_set():
            return err
        if err is not None:
            self._c.log.warning("renewal of %s failed: %s", self.name, err)
            if not isinstance(err, LeaseLost):
                with self._mu:
                    self._renew_err = err
        self._c._each(lambda h: h.on_renewed(self, latency, err))
        return err

    def _renew(self, deadline: _Deadline) -> None:
        for _ in range(4):
            token, base = self._check()
            start = time.monotonic()
            bounded = _Deadline(self.deadline - start, deadline.stop)
            if deadline.at is not None and bounded.at is not None:
                bounded.at = min(bounded.at, deadline.at)
            try:
                path = "/v1/leases/" + quote(self.name, safe="")
                self._c._call(base, "PATCH", path, {"owner_id": self._c.cfg.owner, "token": token,
                                                    "ttl_ms": int(self.ttl * 1000)}, bounded, cap=self.renew_every)
                self._extend(start)
                return
            except (Problem, HolderNotAllowed, httpx.HTTPError) as e:
                r = reaction_to(e)
                if r is Reaction.LOST:
                    lerr = self._lose_unless_moved(token, e)
                    if lerr is not None:
                        raise lerr from e
                elif r is Reaction.REGENERATE:
                    self._regenerate(token, bounded)
                    return
                elif r is Reaction.FOLLOW:
                    self._follow(e)
                elif r is Reaction.RETRY:
                    self._rehome(base, e)
                    raise
                else:
                    raise

    # ---- produce

    def produce(self, batch_id: str, records: Sequence[Record], *, checkpoint: Any = None,
                timeout: float | None = None) -> Result:
        """produce writes records as one batch, in one transaction, and returns where it was committed.

        batch_id (1 to 255 bytes) is the idempotency key: every retry
        reuses it, so the ledger keeps the batch once. checkpoint (bytes,
        str, a JSON value or fencegate.Json; None for none) is committed
        with the batch and read back as written (Lease.checkpoint).
        batch_aborted, 429, 5xx and transport errors are retried on the
        same generation; generation_ended and not_holder under a new one;
        misdirected at the holder; lease_lost and fenced raise LeaseLost;
        other refusals raise their Problem. An error raised after an
        attempt whose outcome stayed unknown has ``outcome_unknown`` set.
        """
        start = time.monotonic()
        err: BaseException | None = None
        try:
            return self._produce(batch_id, records, checkpoint, _Deadline(timeout))
        except BaseException as e:
            err = e
            raise
        finally:
            latency = time.monotonic() - start
            outcome = Outcome.COMMITTED if err is None else (
                Outcome.UNKNOWN if getattr(err, "outcome_unknown", False) else Outcome.REFUSED)
            self._c._each(lambda h: h.on_produced(self, batch_id, outcome, latency, err))

    def _produce(self, batch_id: str, records: Sequence[Record], checkpoint: Any, deadline: _Deadline) -> Result:
        path = "/v1/leases/" + quote(self.name, safe="") + "/records"
        recs = [r.to_json() for r in records]
        unknown = False
        last: BaseException | None = None
        waits = 0
        prev = Reaction.REFUSE

        def fail(e: FencegateError) -> FencegateError:
            if isinstance(e, LeaseLost):
                e = LeaseLost(e.cause)  # the lease's own error is shared by every later call: not marked
            e.outcome_unknown = unknown
            return e

        while True:
            try:
                token, base = self._check()
            except LeaseLost as e:
                raise fail(e) from None
            if deadline.ended():
                raise fail(Timeout(f"produce {batch_id}", last))
            body: dict[str, Any] = {"owner_id": self._c.cfg.owner, "token": token, "batch_id": batch_id,
                                    "records": recs}
            if checkpoint is not None:
                body["checkpoint"] = encode_value(checkpoint)
            try:
                return Result.from_json(self._c._call(base, "POST", path, body, deadline))
            except (Problem, HolderNotAllowed, httpx.HTTPError) as e:
                err: BaseException = e
            unknown = unknown or not _definite(err)
            last = err
            r = reaction_to(err)
            again = r is prev
            prev = r
            if r is Reaction.LOST:
                lerr = self._lose_unless_moved(token, err)
                if lerr is not None:
                    raise fail(lerr) from err
            elif r is Reaction.REGENERATE:
                rerr: BaseException | None = None
                try:
                    self._regenerate(token, deadline)
                except LeaseLost as e:
                    raise fail(e) from err
                except (FencegateError, httpx.HTTPError) as e:
                    rerr = e
                if rerr is not None or again:
                    waits += 1
                    deadline.sleep(self._c._backoff(waits, rerr or err))
            elif r is Reaction.FOLLOW:
                self._follow(err)
                if again:
                    waits += 1
                    deadline.sleep(self._c._backoff(waits, err))
            elif r is Reaction.RETRY:
                self._rehome(base, err)
                self._c.log.debug("produce %s failed, retrying: %s", batch_id, err)
                waits += 1
                deadline.sleep(self._c._backoff(waits, err))
            else:
                if isinstance(err, FencegateError):
                    raise fail(err)
                raise err

    # ---- checkpoint

    def checkpoint(self, timeout: float | None = None) -> Checkpoint | None:
        """checkpoint returns the lease's checkpoint (None when it has none), once the ledger applied this generation's barrier.

        Read it when a generation begins, before producing. ledger_behind,
        5xx and transport errors are retried until timeout; lease_lost
        raises LeaseLost.
        """
        deadline = _Deadline(timeout)
        last: BaseException | None = None
        n = 0
        while True:
            n += 1
            token, base = self._check()
            if deadline.ended():
                raise Timeout(f"checkpoint {self.name}", last)
            wait = DEFAULT_CHECKPOINT_WAIT
            left = deadline.left()
            if left is not None:
                wait = min(wait, left / 2)
            q = urlencode({"owner_id": self._c.cfg.owner, "token": token, "wait": f"{max(int(wait * 1000), 1)}ms"})
            try:
                reply = self._c._call(base, "GET", f"/v1/leases/{quote(self.name, safe='')}/checkpoint?{q}", None,
                                      deadline)
                return checkpoint_from_reply(reply, self._c.cfg.owner)
            except (Problem, HolderNotAllowed, httpx.HTTPError) as e:
                last = e
                r = reaction_to(e)
                if r is Reaction.LOST:
                    lerr = self._lose_unless_moved(token, e)
                    if lerr is not None:
                        raise lerr from e
                elif r is Reaction.FOLLOW:
                    self._follow(e)
                    if n > 1:
                        deadline.sleep(self._c._backoff(n, e))
                elif r is Reaction.RETRY:
                    self._rehome(base, e)
                    deadline.sleep(self._c._backoff(n, e))
                else:
                    raise

    # ---- release

    def release(self, timeout: float | None = None) -> None:
        """release stops renewing and releases the lease; afterwards err is LeaseLost(Released) whatever the answer.

        A lease whose release did not get through expires after its TTL;
        releasing a lease already lost raises its error.
        """
        err: BaseException | None = None
        try:
            self._release(_Deadline(timeout))
        except BaseException as e:
            err = e
            raise
        finally:
            self._c._each(lambda h: h.on_released(self, err))

    def _release(self, deadline: _Deadline) -> None:
        self._stop.set()
        self._wake.set()
        self._close_watch()
        self._done.wait()
        try:
            last: BaseException | None = None
            n = 0
            while True:
                n += 1
                token, base = self._check()
                if deadline.ended():
                    raise Timeout(f"release {self.name}", last)
                q = urlencode({"owner_id": self._c.cfg.owner, "token": token})
                try:
                    self._c._call(base, "DELETE", f"/v1/leases/{quote(self.name, safe='')}?{q}", None, deadline)
                    self._c.log.info("lease %s released", self.name)
                    return
                except (Problem, HolderNotAllowed, httpx.HTTPError) as e:
                    last = e
                    r = reaction_to(e)
                    if r is Reaction.FOLLOW:
                        self._follow(e)
                        if n > 1:
                            deadline.sleep(self._c._backoff(n, e))
                    elif r is Reaction.RETRY:
                        self._rehome(base, e)
                        deadline.sleep(self._c._backoff(n, e))
                    elif r is Reaction.LOST:
                        self._lose(token, e)
                        raise
                    else:
                        raise
        finally:
            with self._mu:
                self._lose_locked(Released("fencegate: lease released"))
            self._fire_lost()

    # ---- notices

    def _close_watch(self) -> None:
        resp = self._watch_resp
        if resp is not None:
            try:
                resp.close()
            except Exception:
                pass

    def _watch_loop(self) -> None:
        def opened(resp: httpx.Response) -> None:
            self._watch_resp = resp

        try:
            self._c._watch(f"/v1/leases/{quote(self.name, safe='')}/events", -1, self._notice, self._wake, opened)
        except Exception as e:
            if not self._wake.is_set():
                self._c.log.debug("not watching lease %s; the renewal alone tells its loss: %s", self.name, e)

    def _notice(self, e: Event) -> None:
        """_notice loses the lease when e shows a later generation or the end of the current one."""
        with self._regen:
            with self._mu:
                cur = self._grant.token
                reason = ""
                if e.kind in ("acquired", "regenerated"):
                    at, granted = parse_time(e.at), self._granted_at()
                    if e.token > cur or (e.token == 0 and e.owner_id != self._c.cfg.owner and at is not None
                                         and granted is not None and at > granted):
                        reason = "taken_over"
                elif e.kind in ("released", "superseded", "abandoned") and e.token == cur:
                    reason = e.kind
                if not reason or self._err is not None or self._stop.is_set():
                    return
                self._lose_locked(NoticeLost(reason, e))
        self._fire_lost()

    def _granted_at(self) -> Any:
        import datetime as dt
        exp = parse_time(self._grant.expires_at)
        return None if exp is None else exp - dt.timedelta(milliseconds=self._grant.ttl_ms)


def _definite(err: BaseException) -> bool:
    """_definite reports whether a produce attempt's error promises nothing of the batch is committed."""
    if isinstance(err, HolderNotAllowed):
        return True  # a 421: the gateway did nothing
    if not isinstance(err, Problem):
        return False
    return produce_outcome(err.status, err.code) is Outcome.REFUSED


class _Guard:
    """_Guard raises LeaseLost in the block of the thread that entered it when the lease is lost."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        self._mu = threading.Lock()
        self._active = False
        self._tid = 0

    def __enter__(self) -> Lease:
        self._tid = threading.get_ident()
        self._active = True
        self._lease.on_lost(self._interrupt)
        return self._lease

    def _interrupt(self, err: LeaseLost) -> None:
        with self._mu:
            if self._active and threading.get_ident() != self._tid:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._tid), ctypes.py_object(_Interrupt))

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        with self._mu:
            self._active = False
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._tid), None)
        err = self._lease.err
        if isinstance(exc, _Interrupt) and err is not None:
            raise err from None
        if exc is None and err is not None and not isinstance(err.cause, Released):
            raise err
