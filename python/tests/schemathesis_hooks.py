"""Schemathesis hooks for the stateful run (SCHEMATHESIS_HOOKS): its scenarios start from a grant.

The stateful phase follows api/openapi.yaml's links from acquire's 201,
so a scenario that starts with a refused acquire follows none. Drawn
from the schema alone, most roots were refused: a TTL under the stack's
--min-ttl (2 s; the schema's minimum is 1 because the store's bounds
are configuration) or a token the caller does not hold; a CI run drew
49 scenarios and followed no link. Here a root acquire asks for a TTL
within the bounds (the minimum to 28 s more, derived from the drawn value) and
without a token, so it takes a fresh lease; negative cases stay as
drawn (they must be refused as drawn). Only the stateful run loads
this; the fuzzing run sends every value the schema allows.
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis

MIN_TTL_MS = int(os.environ["FENCEGATE_MIN_TTL_MS"])  # conftest.MIN_TTL_MS, passed by test_schemathesis.py
TTL_SPAN_MS = 28_001


@schemathesis.hook.apply_to(operation_id="acquireLease")  # type: ignore[attr-defined,untyped-decorator]
def map_case(context: Any, case: Any) -> Any:
    """map_case makes a positive root acquire one the store grants when the name is free.

    A negative case is left as drawn: it must be refused as drawn.
    """
    meta = case.meta
    if meta is None or meta.generation.mode != schemathesis.GenerationMode.POSITIVE or not isinstance(case.body, dict):
        return case
    body = dict(case.body)
    body.pop("token", None)
    ttl = body.get("ttl_ms")
    if isinstance(ttl, int):
        body["ttl_ms"] = MIN_TTL_MS + ttl % TTL_SPAN_MS
    case.body = body
    return case
