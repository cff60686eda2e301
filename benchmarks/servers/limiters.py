"""The real limiters' hosts: HAProxy stick tables and Apache's mod_evasive in front of
the generated static site, what each does above its limit, and the least time a whole
crawl can take without being refused."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .site import Site


@dataclass(frozen=True)
class LimitedHost:
    name: str
    server: str
    """"haproxy" (a frontend with its own stick table) or "apache" (mod_evasive)."""
    what: str
    """One line for the README's table."""
    limit: int
    """HAProxy: ``sc_http_req_rate(0) gt limit``; mod_evasive: ``DOSSiteCount``."""
    period: float
    """HAProxy: the rate's period (``http_req_rate(period)``); mod_evasive:
    ``DOSSiteInterval``, whole seconds."""
    status: int = 403
    """HAProxy's ``deny_status`` (403 is its default); mod_evasive always answers 403."""
    block_seconds: int = 0
    """mod_evasive's ``DOSBlockingPeriod``, renewed by every request during a block."""

    def possible_seconds(self, site: Site) -> float:
        """From the first request to the last, asking for every reachable URL once.

        HAProxy's ``http_req_rate`` is this period's count plus the last period's,
        weighted by what remains of this one, and counts the requests it denies: past
        a first burst of ``limit``, a client is held to ``limit`` per ``period``, so the
        n-th request comes at n x period / limit at the earliest.

        mod_evasive's site counter grows with every request that comes less than
        ``period`` (whole) seconds after the one before, and blocks at ``limit``: the
        fastest crawl is bursts of ``limit`` with a pause of ``period`` between them.
        """
        count = len(site.requests())
        if self.server == "haproxy":
            return count * self.period / self.limit if count > self.limit else 0.0
        return (math.ceil(count / self.limit) - 1) * self.period


LIMITED: tuple[LimitedHost, ...] = (
    LimitedHost(
        "haproxy-429",
        "haproxy",
        "HAProxy stick table, more than 80 requests per 10 s"
        " (`http_req_rate`, denied ones counted) → `deny_status 429`, no Retry-After",
        limit=80,
        period=10.0,
        status=429,
    ),
    LimitedHost(
        "haproxy-403",
        "haproxy",
        "HAProxy stick table, more than 40 requests per 10 s → `deny` (its default 403),"
        " denied ones counted",
        limit=40,
        period=10.0,
    ),
    LimitedHost(
        "evasive",
        "apache",
        "Apache + mod_evasive, more than 20 requests without a 2 s pause → 403 for 5 s,"
        " renewed by every hit",
        limit=20,
        period=2.0,
        block_seconds=5,
    ),
)
