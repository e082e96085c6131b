"""fencegate: the Python SDK of the fencegate gateway (a fenced Kafka produce gateway).

Acquire a lease, keep it renewed, produce batches with idempotent
retries, read the checkpoint after a takeover, release; or let
Client.run supervise all of it and write only the step. The behaviour is
the Go SDK's (client/ in the repository), point by point.
"""

from ._types import Checkpoint, Grant, Hooks, Json, Record, Result, committed
from .client import (DEFAULT_MAX_BACKOFF, DEFAULT_MIN_BACKOFF, DEFAULT_TTL, Client, Config, Lease, Timeout,
                     backoff)
from .errors import *  # noqa: F403
from .errors import __all__ as _errors_all
from .run import Step, run

__all__ = ["Checkpoint", "Grant", "Hooks", "Json", "Record", "Result", "committed", "Client", "Config", "Lease",
           "Timeout", "backoff", "DEFAULT_TTL", "DEFAULT_MIN_BACKOFF", "DEFAULT_MAX_BACKOFF", "Step", "run",
           *_errors_all]
