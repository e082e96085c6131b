"""What could never succeed is refused at once, with nothing sent: the Go SDK's rules (client/config_test.go)."""

from __future__ import annotations

import pytest

import fencegate
from fencegate._holders import HolderPolicy


def cfg(**kw: object) -> fencegate.Config:
    base: dict[str, object] = {"base_url": "http://fencegate:8080", "token": "t", "owner": "w1"}
    base.update(kw)
    return fencegate.Config(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("kw", [
    {"base_url": "fencegate:8080"}, {"base_url": "ftp://fencegate"}, {"base_url": "http://"},
    {"base_url": "http://u:p@fencegate"}, {"base_url": "http://fencegate/?q=1"}, {"base_url": "http://fencegate/#f"},
    {"token": "Bearer t"}, {"token": ""}, {"owner": ""}, {"ttl": 1.0, "renew_every": 1.0},
    {"ttl": 0.0001}, {"min_backoff": 0}, {"min_backoff": 2.0, "max_backoff": 1.0},
    {"holder_hosts": ["http://gw1"]}, {"holder_hosts": ["gw1:8080"]}, {"holder_hosts": [".com"]},
    {"hooks": [object()]},
], ids=str)
def test_config_refused(kw: dict[str, object]) -> None:
    with pytest.raises(fencegate.FencegateError):
        fencegate.Client(cfg(**kw))


def test_acquire_options_refused_before_sending() -> None:
    c = fencegate.Client(cfg(base_url="http://127.0.0.1:9"))  # nothing listens: a request would hang in retries
    with pytest.raises(fencegate.FencegateError, match="renew_every"):
        c.acquire("shard:1", ttl=1.0, renew_every=2.0)


@pytest.mark.parametrize("base,entries,url,ok", [
    ("https://fencegate.prod.example.com", None, "https://gw-1.prod.example.com:8443", True),
    ("https://fencegate.prod.example.com", None, "https://other.example.com", False),
    ("https://fencegate.prod.example.com", None, "http://gw-1.prod.example.com", False),  # never https -> http
    ("http://fencegate-gateway", None, "http://gw-2", False),
    ("http://10.0.0.1:8080", None, "http://10.0.0.1:8081", True),
    ("http://10.0.0.1:8080", None, "http://10.0.0.2:8080", False),
    ("http://10.0.0.1:8080", ["10.0.0.0/8"], "http://10.9.9.9:8080", True),
    ("http://gw", [".example.internal"], "http://a.example.internal", True),
    ("http://gw", ["gw2"], "http://gw2:1", True),
    ("http://gw", ["gw2"], "http://u@gw2:1", False),
    ("http://gw", None, "not a url", False),
])
def test_holder_policy(base: str, entries: list[str] | None, url: str, ok: bool) -> None:
    p = HolderPolicy(base, entries)
    if ok:
        p.allow(url)
    else:
        with pytest.raises(fencegate.HolderNotAllowed):
            p.allow(url)


def test_backoff_bounds() -> None:
    for n in range(1, 10):
        d = fencegate.backoff(n, 0.1, 1.0)
        assert 0.05 <= d <= 1.0
    assert fencegate.backoff(1, 0.1, 1.0, retry_after=3.0) == 3.0
