"""The answer table: api/answers.json, the vectors the gateway's and the Go SDK's tests read too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import fencegate
from fencegate import errors

VECTORS: list[dict[str, Any]] = json.loads((Path(__file__).resolve().parents[2] / "api/answers.json").read_text())[
    "answers"]


@pytest.mark.parametrize("v", VECTORS, ids=[v["code"] for v in VECTORS])
def test_answer_vector(v: dict[str, Any]) -> None:
    body = json.dumps({"type": "about:blank", "title": "t", "status": v["status"], "code": v["code"],
                       "holder_url": "http://gw-2:8080"}).encode()
    p = errors.problem_from_reply(v["status"], body)
    assert type(p).__name__ == v["exception"] and isinstance(p, fencegate.Problem)
    assert getattr(fencegate, v["exception"]) is type(p)  # importable from the package by that name
    assert p.code == v["code"] and p.status == v["status"]
    r = errors.reaction_to(p)
    assert r.value == v["reaction"]
    assert (r in (errors.Reaction.RETRY, errors.Reaction.FOLLOW, errors.Reaction.REGENERATE)) == v["retryable"]
    assert errors.produce_outcome(v["status"], v["code"]).value == v["produce_outcome"]


def test_every_code_is_a_vector() -> None:
    assert sorted(errors.PROBLEM_CLASSES) == sorted(v["code"] for v in VECTORS)


def test_unknown_codes_and_pages() -> None:
    page = errors.problem_from_reply(502, b"<html>bad gateway</html>")
    assert type(page) is fencegate.Problem and errors.reaction_to(page) is errors.Reaction.RETRY
    newer = errors.problem_from_reply(409, b'{"code": "from_a_newer_gateway"}')
    assert errors.reaction_to(newer) is errors.Reaction.REFUSE and newer.code == "from_a_newer_gateway"
    no_holder = errors.problem_from_reply(421, b'{"code": "misdirected"}')
    assert errors.reaction_to(no_holder) is errors.Reaction.RETRY
    assert errors.produce_outcome(0, "") is errors.Outcome.UNKNOWN
