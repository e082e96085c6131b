"""The worker of python/README.md runs as written against the gateway, and goes on from its checkpoint."""

from __future__ import annotations

import re
from pathlib import Path

import fencegate

from conftest import Stack

README = Path(__file__).resolve().parents[1] / "README.md"


def worker_source(url: str, lease: str) -> str:
    text = README.read_text()
    block = re.search(r"## A worker.*?```python\n(.*?)```", text, re.S)
    assert block is not None, "python/README.md has no worker example"
    return block.group(1).replace("http://127.0.0.1:8080", url).replace('"shard:42"', repr(lease))


def test_readme_worker_runs(stack: Stack, lease_name: str) -> None:
    src = worker_source(stack.url, lease_name)
    exec(compile(src, str(README), "exec"), {"__name__": "readme"})  # the worker produces its four docs
    with stack.client("indexer-17") as c:
        lease = c.acquire(lease_name, timeout=30)
        cp = lease.checkpoint(timeout=30)
        assert cp is not None and cp.value == {"next": 4} and cp.batch_id == "doc-d"
        lease.release(timeout=10)
    # Run again: the worker resumes from the checkpoint and has nothing left to write.
    exec(compile(src, str(README), "exec"), {"__name__": "readme"})
    with stack.client("indexer-17") as c:
        cp = c.acquire(lease_name, timeout=30).checkpoint(timeout=30)
        assert cp is not None and cp.batch_id == "doc-d"
    assert fencegate.committed(cp, "doc-d")
