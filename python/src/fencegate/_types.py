"""Values of the fencegate SDK: grants, records, results, checkpoints, hooks."""

from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from .errors import Outcome

if TYPE_CHECKING:
    from .client import Lease


@dataclass(frozen=True)
class Json:
    """Json marks a value to send as {"type": "JSON"} when it could be taken for another type (a str)."""

    data: Any


Value = bytes | str | Json | None
"""Value is a key or value of a record: bytes (BINARY), str (STRING), Json (JSON) or None (null)."""


def encode_value(v: Any) -> dict[str, Any] | None:
    """encode_value is v in the typed encoding of the JSON bodies.

    bytes is BINARY, str is STRING, Json(x) and any other JSON value (a
    dict, a list, a number, a bool) is JSON; None is null.
    """
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"type": "BINARY", "data": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, str):
        return {"type": "STRING", "data": v}
    if isinstance(v, Json):
        return {"type": "JSON", "data": v.data}
    return {"type": "JSON", "data": v}


def decode_value(v: Mapping[str, Any]) -> Any:
    """decode_value is the value a typed value stands for: bytes, str or the parsed JSON."""
    kind, data = v.get("type"), v.get("data")
    if kind == "BINARY":
        return base64.b64decode(str(data or ""), validate=True)
    if kind == "STRING":
        return str(data or "")
    if kind == "JSON":
        return data
    raise ValueError(f"value of type {kind!r}: not BINARY, STRING or JSON")


def parse_time(s: str) -> dt.datetime | None:
    """parse_time reads the gateway's RFC 3339 times (nanoseconds allowed); None when empty or malformed."""
    if not s:
        return None
    s = s.replace("Z", "+00:00")
    if "." in s:
        head, rest = s.split(".", 1)
        digits = len(rest) - len(rest.lstrip("0123456789"))
        s = head + "." + rest[:min(digits, 6)].ljust(6, "0") + rest[digits:]
    try:
        return dt.datetime.fromisoformat(s)
    except ValueError:
        return None


@dataclass(frozen=True)
class Grant:
    """Grant is an acknowledged generation of a lease; token names it and only grows."""

    name: str
    owner_id: str
    token: int
    expires_at: str
    ttl_ms: int
    topic: str = ""
    partition: int = 0
    transactional_id: str = ""
    producer_id: int = 0
    producer_epoch: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Grant:
        return cls(name=str(d.get("name", "")), owner_id=str(d.get("owner_id", "")), token=int(d.get("token", 0)),
                   expires_at=str(d.get("expires_at", "")), ttl_ms=int(d.get("ttl_ms", 0)),
                   topic=str(d.get("topic", "")), partition=int(d.get("partition", 0)),
                   transactional_id=str(d.get("transactional_id", "")), producer_id=int(d.get("producer_id", 0)),
                   producer_epoch=int(d.get("producer_epoch", 0)))


@dataclass(frozen=True)
class Record:
    """Record is one record to produce: key and value bytes, str, Json or None; headers UTF-8 without NUL."""

    value: Value = None
    key: Value = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"key": encode_value(self.key), "value": encode_value(self.value)}
        if self.headers:
            d["headers"] = dict(self.headers)
        return d


@dataclass(frozen=True)
class Result:
    """Result says where a committed batch is; token is the generation that committed it."""

    name: str
    token: int
    topic: str
    partition: int
    offsets: list[int]
    producer_epoch: int = 0
    checkpoint_offset: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Result:
        return cls(name=str(d.get("name", "")), token=int(d.get("token", 0)), topic=str(d.get("topic", "")),
                   partition=int(d.get("partition", 0)), offsets=[int(o) for o in d.get("offsets", [])],
                   producer_epoch=int(d.get("producer_epoch", 0)),
                   checkpoint_offset=int(d.get("checkpoint_offset", 0) or 0))


@dataclass(frozen=True)
class Checkpoint:
    """Checkpoint is a lease's checkpoint as the ledger keeps it.

    value is what the batch carried, of the type it was written as:
    bytes, str, or the JSON value. token, owner_id and batch_id name the
    generation, owner and batch that wrote it.
    """

    value: Any
    type: str
    token: int
    owner_id: str
    batch_id: str
    partition: int
    offset: int
    reader: str = ""

    def committed(self, batch_id: str) -> bool:
        """committed reports whether batch batch_id of the reading owner wrote this checkpoint (so it landed)."""
        return self.batch_id == batch_id and self.owner_id == self.reader


def committed(cp: Checkpoint | None, batch_id: str) -> bool:
    """committed is Checkpoint.committed, False for no checkpoint."""
    return cp is not None and cp.committed(batch_id)


def checkpoint_from_reply(d: Mapping[str, Any], reader: str) -> Checkpoint | None:
    c = d.get("checkpoint")
    if not c:
        return None
    v = c.get("value") or {}
    return Checkpoint(value=decode_value(v), type=str(v.get("type", "")), token=int(c.get("token", 0)),
                      owner_id=str(c.get("owner_id", "")), batch_id=str(c.get("batch_id", "")),
                      partition=int(c.get("partition", 0)), offset=int(c.get("offset", 0)), reader=reader)


class Hooks:
    """Hooks are called at the points of every lease's life, for metrics and tracing.

    Subclass it and override what you need; give instances in
    Config.hooks. Hooks run on the thread doing the work (the caller's or
    a lease's renewer): keep them short. An exception of a hook is logged
    and dropped, so that it never stops a renewal.
    """

    def on_acquired(self, lease: Lease, latency: float) -> None:
        """on_acquired: acquire returned lease after latency seconds, retries and waits included."""

    def on_renewed(self, lease: Lease, latency: float, err: BaseException | None) -> None:
        """on_renewed: a renewal ended; err is None when the local deadline moved."""

    def on_produced(self, lease: Lease, batch_id: str, outcome: Outcome, latency: float,
                    err: BaseException | None) -> None:
        """on_produced: Lease.produce returned (committed, refused, or outcome unknown)."""

    def on_lost(self, lease: Lease, err: BaseException) -> None:
        """on_lost: the lease held was lost (not released); err is Lease.err."""

    def on_released(self, lease: Lease, err: BaseException | None) -> None:
        """on_released: Lease.release returned with err."""

