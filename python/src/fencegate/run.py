"""The supervised run: the worker writes its step, the SDK runs the lease's life around it.

run acquires the lease (waiting while another owner holds it), reads the
checkpoint, calls the step with where to resume, and when the lease is
lost backs off and starts over; when the step returns, it releases the
lease. A batch whose outcome stayed unknown when the lease was lost is
settled by the next checkpoint read (Step.settled). It is the loop of
the Go SDK's Client.Run, and of the long form in the README.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from ._types import Checkpoint, Record, Result, committed
from .client import Timeout, backoff
from .errors import FencegateError, LeaseLost

if TYPE_CHECKING:
    from .client import Client, Lease

T = TypeVar("T")

LOSS_MIN_BACKOFF = 0.1
"""LOSS_MIN_BACKOFF and LOSS_MAX_BACKOFF bound the wait after a loss before run acquires again, in seconds."""
LOSS_MAX_BACKOFF = 10.0


@dataclass
class Step:
    """Step is what the step function receives for one generation of the lease.

    resume is the checkpoint's value to go on from (None: start from the
    beginning), as it was written (bytes, str or the JSON value); lost is
    set the moment the lease is lost (a long step checks it, or selects on
    it); produce is Lease.produce that also remembers a batch whose outcome
    stayed unknown, which the next generation settles; settled says, for
    each such batch of an earlier generation, whether it landed.
    """

    lease: Lease
    resume: Any
    found: Checkpoint | None
    settled: dict[str, bool] = field(default_factory=dict)
    _uncertain: list[str] = field(default_factory=list)

    @property
    def lost(self) -> threading.Event:
        """lost is set once the lease can no longer write."""
        return self.lease.lost

    def produce(self, batch_id: str, records: Sequence[Record], *, checkpoint: Any = None,
                timeout: float | None = None) -> Result:
        """produce is Lease.produce; a batch left with its outcome unknown is settled after the next acquire."""
        try:
            return self.lease.produce(batch_id, records, checkpoint=checkpoint, timeout=timeout)
        except FencegateError as e:
            if e.outcome_unknown:
                self._uncertain.append(batch_id)
            raise

    def raise_if_lost(self) -> None:
        """raise_if_lost raises the lease's LeaseLost once it is lost."""
        err = self.lease.err
        if err is not None:
            raise err


def run(client: Client, name: str, step: Callable[[Step], T], *, stop: threading.Event | None = None,
        ttl: float | None = None, max_losses: int | None = None) -> T | None:
    """run supervises lease name for step until step returns (its value) or stop is set (None).

    Each generation: acquire_wait, read the checkpoint, step(Step). A
    LeaseLost out of step (or a step that returns after the loss with an
    error) backs off and starts over; any other exception releases the
    lease and is raised. After max_losses losses the last LeaseLost is
    raised (None: never).
    """
    stop = stop or threading.Event()
    uncertain: list[str] = []
    losses = 0
    while not stop.is_set():
        try:
            lease = client.acquire_wait(name, ttl=ttl, timeout=1.0)
        except Timeout:
            continue  # the lease is held, or the gateway does not answer: look at stop, then wait again
        s: Step | None = None
        try:
            found = lease.checkpoint()
            s = Step(lease=lease, resume=None if found is None else found.value, found=found,
                     settled={b: committed(found, b) for b in uncertain})
            uncertain = []
            for batch, landed in s.settled.items():
                client.log.info("lease %s: batch %s of an earlier generation %s", name, batch,
                                "landed" if landed else "did not land")
            result = step(s)
        except LeaseLost as e:
            uncertain += s._uncertain if s is not None else []
            losses += 1
            client.log.warning("lease %s lost (%s): backing off, then acquiring again", name, e)
            if max_losses is not None and losses > max_losses:
                raise
            stop.wait(backoff(losses, LOSS_MIN_BACKOFF, LOSS_MAX_BACKOFF))
            continue
        except BaseException:
            _release(lease)
            raise
        _release(lease)
        return result
    return None


def _release(lease: Lease) -> None:
    try:
        lease.release(timeout=lease.ttl)
    except FencegateError:
        pass  # lost already, or not released: it expires after its TTL
