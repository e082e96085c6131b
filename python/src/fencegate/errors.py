"""The errors of the fencegate SDK and the one answer table it reads.

Every problem+json reply of the gateway becomes a Problem: an instance of
the one subclass of its code (LeaseHeldProblem for lease_held, ...), with
the code kept in ``code``. Switch on the class or on ``code``, never on
``detail``. api/answers.json in the repository is the table as test
vectors; the Python, the Go SDK's and the gateway's tests all read it.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = [
    "FencegateError", "Problem", "LeaseLost", "DeadlinePassed", "Released", "Closed",
    "HolderNotAllowed", "NoticeLost", "Reaction", "Outcome", "PROBLEM_CLASSES",
    "reaction_to", "produce_outcome", "outcome_unknown", "problem_from_reply", "Event",
    "InvalidRequestProblem", "UnauthorizedProblem", "ForbiddenProblem", "NotFoundProblem", "MethodNotAllowedProblem", "LeaseHeldProblem", "LeaseLostProblem", "FencedProblem", "NotHolderProblem", "MisdirectedProblem", "GenerationEndedProblem", "BatchAbortedProblem", "PayloadTooLargeProblem", "TooManyRequestsProblem", "KafkaUnavailableProblem", "StoreUnavailableProblem", "DrainingProblem", "InternalProblem", "DirectClientGatedProblem", "RolloutStepRefusedProblem", "LedgerBehindProblem", "ForwardFailedProblem",
]


class FencegateError(Exception):
    """FencegateError is the base of every error the SDK raises.

    ``outcome_unknown`` is True on an error a produce raised after an
    attempt whose outcome stayed unknown: the batch may be committed, and
    retrying the same batch id never puts it in the ledger twice.
    """

    outcome_unknown: bool = False


class Problem(FencegateError):
    """Problem is an error reply of the gateway (RFC 9457 problem+json).

    The subclass is the code's (PROBLEM_CLASSES); the members beyond RFC
    9457's come with the codes docs/api.md names and are empty otherwise.
    """

    code: str = ""

    def __init__(self, status: int, doc: Mapping[str, Any], retry_after: float = 0.0) -> None:
        self.status = status
        self.type = str(doc.get("type", ""))
        self.title = str(doc.get("title", ""))
        self.detail = str(doc.get("detail", ""))
        self.code = str(doc.get("code", type(self).code))
        self.holder_owner_id = str(doc.get("holder_owner_id", ""))
        self.expires_at = str(doc.get("expires_at", ""))
        self.reason = str(doc.get("reason", ""))
        self.holder = str(doc.get("holder", ""))
        self.holder_url = str(doc.get("holder_url", ""))
        self.cause = str(doc.get("cause", ""))
        self.pattern = str(doc.get("pattern", ""))
        self.rollout_state = str(doc.get("rollout_state", ""))
        self.blocking_leases = [str(x) for x in doc.get("blocking_leases", []) or []]
        self.ledger_token = int(doc.get("ledger_token", 0) or 0)
        self.retry_after = retry_after
        text = f"fencegate: {status} {self.code}"
        super().__init__(f"{text}: {self.detail}" if self.detail else text)


class InvalidRequestProblem(Problem):
    """InvalidRequestProblem is the reply of code invalid_request (400)."""

    code = "invalid_request"


class UnauthorizedProblem(Problem):
    """UnauthorizedProblem is the reply of code unauthorized (401)."""

    code = "unauthorized"


class ForbiddenProblem(Problem):
    """ForbiddenProblem is the reply of code forbidden (403)."""

    code = "forbidden"


class NotFoundProblem(Problem):
    """NotFoundProblem is the reply of code not_found (404)."""

    code = "not_found"


class MethodNotAllowedProblem(Problem):
    """MethodNotAllowedProblem is the reply of code method_not_allowed (405)."""

    code = "method_not_allowed"


class LeaseHeldProblem(Problem):
    """LeaseHeldProblem is the reply of code lease_held (409)."""

    code = "lease_held"


class LeaseLostProblem(Problem):
    """LeaseLostProblem is the reply of code lease_lost (409)."""

    code = "lease_lost"


class FencedProblem(Problem):
    """FencedProblem is the reply of code fenced (409)."""

    code = "fenced"


class NotHolderProblem(Problem):
    """NotHolderProblem is the reply of code not_holder (409)."""

    code = "not_holder"


class MisdirectedProblem(Problem):
    """MisdirectedProblem is the reply of code misdirected (421)."""

    code = "misdirected"


class GenerationEndedProblem(Problem):
    """GenerationEndedProblem is the reply of code generation_ended (409)."""

    code = "generation_ended"


class BatchAbortedProblem(Problem):
    """BatchAbortedProblem is the reply of code batch_aborted (503)."""

    code = "batch_aborted"


class PayloadTooLargeProblem(Problem):
    """PayloadTooLargeProblem is the reply of code payload_too_large (413)."""

    code = "payload_too_large"


class TooManyRequestsProblem(Problem):
    """TooManyRequestsProblem is the reply of code too_many_requests (429)."""

    code = "too_many_requests"


class KafkaUnavailableProblem(Problem):
    """KafkaUnavailableProblem is the reply of code kafka_unavailable (503)."""

    code = "kafka_unavailable"


class StoreUnavailableProblem(Problem):
    """StoreUnavailableProblem is the reply of code store_unavailable (503)."""

    code = "store_unavailable"


class DrainingProblem(Problem):
    """DrainingProblem is the reply of code draining (503)."""

    code = "draining"


class InternalProblem(Problem):
    """InternalProblem is the reply of code internal (500)."""

    code = "internal"


class DirectClientGatedProblem(Problem):
    """DirectClientGatedProblem is the reply of code direct_client_gated (403)."""

    code = "direct_client_gated"


class RolloutStepRefusedProblem(Problem):
    """RolloutStepRefusedProblem is the reply of code rollout_step_refused (409)."""

    code = "rollout_step_refused"


class LedgerBehindProblem(Problem):
    """LedgerBehindProblem is the reply of code ledger_behind (503)."""

    code = "ledger_behind"


class ForwardFailedProblem(Problem):
    """ForwardFailedProblem is the reply of code forward_failed (502)."""

    code = "forward_failed"


class Reaction(enum.Enum):
    """Reaction is what the SDK does about an answer (docs/api.md, the answer table)."""

    REFUSE = "refuse"  # a definite refusal the worker must fix
    HELD = "held"  # another owner holds the lease; only a waiting acquire retries
    LOST = "lost"  # the generation is over; the lease may be someone else's
    REGENERATE = "regenerate"  # ask for a new generation with the current token
    FOLLOW = "follow"  # resend to holder_url
    RETRY = "retry"  # the same request again after a backoff


_REACTIONS: dict[str, Reaction] = {
    "invalid_request": Reaction.REFUSE, "unauthorized": Reaction.REFUSE, "forbidden": Reaction.REFUSE,
    "not_found": Reaction.REFUSE, "method_not_allowed": Reaction.REFUSE, "payload_too_large": Reaction.REFUSE,
    "lease_held": Reaction.HELD, "lease_lost": Reaction.LOST, "fenced": Reaction.LOST,
    "not_holder": Reaction.REGENERATE, "generation_ended": Reaction.REGENERATE, "misdirected": Reaction.FOLLOW,
    "batch_aborted": Reaction.RETRY, "too_many_requests": Reaction.RETRY, "kafka_unavailable": Reaction.RETRY,
    "store_unavailable": Reaction.RETRY, "draining": Reaction.RETRY, "internal": Reaction.RETRY,
    "direct_client_gated": Reaction.REFUSE, "rollout_step_refused": Reaction.REFUSE,
    "ledger_behind": Reaction.RETRY, "forward_failed": Reaction.RETRY,
}

PROBLEM_CLASSES: dict[str, type[Problem]] = {cls.code: cls for cls in Problem.__subclasses__()}
"""PROBLEM_CLASSES maps every code of the gateway to its Problem subclass."""


def problem_from_reply(status: int, body: bytes, retry_after: float = 0.0) -> Problem:
    """problem_from_reply is the Problem of an error reply (a proxy's HTML page too: status says enough)."""
    doc: Any
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    cls = PROBLEM_CLASSES.get(str(doc.get("code", "")), Problem)
    return cls(status, doc, retry_after)


def reaction_to(err: BaseException) -> Reaction:
    """reaction_to classifies the error of one request; a transport error is retried."""
    if not isinstance(err, Problem):
        return Reaction.RETRY  # no answer: the caller's deadline decides
    r = _REACTIONS.get(err.code)
    if r is None:
        # A reply without a known code (a proxy's 502, a newer gateway).
        return Reaction.RETRY if err.status >= 500 else Reaction.REFUSE
    if r is Reaction.FOLLOW and not err.holder_url:
        return Reaction.RETRY
    return r


class Outcome(enum.Enum):
    """Outcome is what an answer to a produce says about its batch."""

    UNKNOWN = "unknown"
    COMMITTED = "committed"
    REFUSED = "refused"


def produce_outcome(status: int, code: str) -> Outcome:
    """produce_outcome classifies an answer to a produce (status 0: no answer at all)."""
    if status == 200:
        return Outcome.COMMITTED
    if code == "generation_ended":
        return Outcome.UNKNOWN
    if code in ("batch_aborted", "draining") or 400 <= status < 500:
        return Outcome.REFUSED
    return Outcome.UNKNOWN


def outcome_unknown(err: BaseException) -> bool:
    """outcome_unknown reports whether err leaves a produced batch's outcome unknown."""
    return isinstance(err, FencegateError) and err.outcome_unknown


class LeaseLost(FencegateError):
    """LeaseLost: the lease can no longer write. ``cause`` says why.

    The cause is a Problem (lease_lost with its reason, fenced),
    DeadlinePassed, Released or NoticeLost.
    """

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__("fencegate: lease lost: " + _bare(cause))


class DeadlinePassed(FencegateError):
    """DeadlinePassed: no renewal succeeded before the lease's local deadline."""


class Released(FencegateError):
    """Released: the worker released the lease."""


class Closed(FencegateError):
    """Closed: the client was closed."""


class HolderNotAllowed(FencegateError):
    """HolderNotAllowed: a 421 named a holder_url the SDK will not send the token to."""


@dataclass
class Event:
    """Event is one event of a watch stream: a transition of a lease."""

    id: int
    name: str
    kind: str
    owner_id: str = ""
    token: int = 0
    holder: str = ""
    at: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


class NoticeLost(FencegateError):
    """NoticeLost is the cause of a lease lost to a watch notice (taken_over, released, superseded, abandoned)."""

    def __init__(self, reason: str, event: Event) -> None:
        self.reason = reason
        self.event = event
        super().__init__(f"fencegate: notice: lease {event.name} {reason.replace('_', ' ')} "
                         f"(event {event.id} {event.kind}, token {event.token}, owner {event.owner_id!r})")


def _bare(err: BaseException) -> str:
    return str(err).removeprefix("fencegate: ")
