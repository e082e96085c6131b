"""Where a 421's holder_url may send the lease's requests, and with them the bearer token (FM42).

The rules are the Go SDK's (client/holder.go), point by point.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit, SplitResult

from .errors import FencegateError, HolderNotAllowed

_Net = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_base_url(raw: str) -> SplitResult:
    """parse_base_url accepts Config.base_url: an http:// or https:// URL with a host and at most a path."""
    reason = ""
    try:
        u = urlsplit(raw)
        host = u.hostname or ""
        _ = u.port
    except ValueError as e:
        reason = f"does not parse: {e}"
    if "://" not in raw:
        reason = f"has no scheme (write http://{raw} or https://{raw})"
    elif reason:
        pass
    elif u.scheme not in ("http", "https"):
        reason = f"has scheme {u.scheme}, not http or https"
    elif not host:
        reason = "has no host"
    elif u.username is not None or "@" in u.netloc:
        reason = "carries user information (the token authenticates)"
    elif u.query or u.fragment or raw.endswith("?") or "#" in raw:
        reason = "carries a query or a fragment"
    else:
        return u
    raise FencegateError(f"fencegate: base_url {raw!r} {reason}")


def _host_of(u: SplitResult) -> str:
    return (u.hostname or "").lower().rstrip(".")


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


class HolderPolicy:
    """HolderPolicy says which hosts a 421's holder_url may name (Config.holder_hosts)."""

    def __init__(self, base_url: str, entries: list[str] | None) -> None:
        u = parse_base_url(base_url)
        self.scheme = u.scheme
        self.host = _host_of(u)
        self.hosts: set[str] = set()
        self.suffixes: list[str] = []
        self.nets: list[_Net] = []
        self._allow_entry(self.host)
        if entries is None:
            labels = self.host.split(".")
            if _ip(self.host) is None and len(labels) >= 3:
                self.suffixes.append("." + ".".join(labels[1:]))
            return
        for e in entries:
            self._allow_entry(e.strip().lower().rstrip("."))

    def _allow_entry(self, e: str) -> None:
        try:
            self.nets.append(ipaddress.ip_network(e, strict=False))
            return
        except ValueError:
            pass
        if not e or any(c in e for c in "/:*@ "):
            raise FencegateError(
                f"fencegate: holder_hosts entry {e!r} is not a host name, a .domain, an IP address or a CIDR prefix")
        if e.startswith("."):
            if e.count(".") < 2:
                raise FencegateError(f"fencegate: holder_hosts entry {e!r} would allow a whole top-level domain")
            self.suffixes.append(e)
        else:
            self.hosts.add(e)

    def allow(self, raw: str) -> None:
        """allow returns when requests may follow a 421 to raw, else raises HolderNotAllowed saying why."""
        try:
            u = urlsplit(raw)
            host = _host_of(u)
        except ValueError:
            host, u = "", urlsplit("")
        if not u.netloc or not host:
            raise HolderNotAllowed(f"fencegate: holder_url not allowed: {raw!r} is not a URL with a host")
        if u.scheme != self.scheme:
            raise HolderNotAllowed(f"fencegate: holder_url not allowed: {raw!r} is {u.scheme}, base_url is "
                                   f"{self.scheme}; the token is only sent over the base URL's scheme")
        if "@" in u.netloc or u.query or u.fragment:
            raise HolderNotAllowed(
                f"fencegate: holder_url not allowed: {raw!r} carries user information, a query or a fragment")
        ip = _ip(host)
        if ip is not None:
            if any(ip in n for n in self.nets if n.version == ip.version):
                return
        elif host in self.hosts or any(host.endswith(s) for s in self.suffixes):
            return
        raise HolderNotAllowed(f"fencegate: holder_url not allowed: host {host} of {raw!r} is not allowed "
                               "(Config.holder_hosts)")
