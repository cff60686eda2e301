"""The benchmark's seven nginx hosts: what each serves, how stock nginx limits it, its
``server`` block, and the least time its limits allow for a whole crawl of it."""

from __future__ import annotations

from dataclasses import dataclass

from .site import Site

#: Requests at once that a crawler gives one host where the server sets no limit:
#: Scrapy's ``CONCURRENT_REQUESTS_PER_DOMAIN`` default (and scrapy-aimd's maximum).
CRAWLER_PER_HOST = 8


@dataclass(frozen=True)
class NginxHost:
    name: str
    what: str
    """One line for the README's table."""
    sections: tuple[str, ...]
    rate: int | None = None
    """``limit_req`` rate, requests per second."""
    burst: int = 0
    nodelay: bool = True
    """With a burst: answer the burst at once (``nodelay``), or queue it at the rate."""
    retry_after: int | None = None
    """Seconds in a ``Retry-After`` header on every 429."""
    connections: int | None = None
    """``limit_conn``: requests at once, 503 above."""
    bytes_per_second: int | None = None
    """``limit_rate``: each response's body at this many bytes per second."""
    crawl_delay: float | None = None
    disallow: tuple[str, ...] = ()

    def robots_txt(self) -> str | None:
        if self.crawl_delay is None and not self.disallow:
            return None  # robots.txt answers 404: everything is allowed
        lines = ["User-agent: *"]
        lines += [f"Disallow: {path}" for path in self.disallow]
        if self.crawl_delay is not None:
            lines.append(f"Crawl-delay: {self.crawl_delay:g}")
        return "\n".join(lines) + "\n"

    def zones(self) -> list[str]:
        """The ``http``-level zones this host's limits need."""
        out = []
        if self.rate is not None:
            out.append(
                f"limit_req_zone $binary_remote_addr zone={self.name}_req:1m rate={self.rate}r/s;"
            )
        if self.connections is not None:
            out.append(f"limit_conn_zone $binary_remote_addr zone={self.name}_conn:1m;")
        if self.retry_after is not None:
            variable = f"${self.name}_retry_after"
            out.append(f'map $status {variable} {{ 429 {self.retry_after}; default ""; }}')
        return out

    def server_block(self, address: str, port: int, root: str) -> str:
        lines = [
            f"listen {address}:{port} default_server;",
            f"root {root};",
            "index index.html;",
            "error_page 404 /404.html;",
        ]
        if self.rate is not None:
            burst = f" burst={self.burst}" if self.burst else ""
            delay = " nodelay" if self.burst and self.nodelay else ""
            lines += [f"limit_req zone={self.name}_req{burst}{delay};", "limit_req_status 429;"]
        if self.retry_after is not None:
            # An empty value sends no header: only the 429s carry it.
            lines.append(f"add_header Retry-After ${self.name}_retry_after always;")
        if self.connections is not None:
            lines += [f"limit_conn {self.name}_conn {self.connections};", "limit_conn_status 503;"]
        if self.bytes_per_second is not None:
            lines.append(f"limit_rate {self.bytes_per_second};")
        body = "\n".join(f"        {line}" for line in lines)
        return f"    server {{  # {self.name}: {self.what}\n{body}\n    }}"

    def possible_seconds(self, site: Site) -> float:
        """The least time from the first request (robots.txt) to the last response of a
        crawl that asks for every reachable URL once and is never refused: the largest
        of what the rate, the Crawl-delay, the body rate and the concurrency allow."""
        requests = site.requests()
        bounds = [0.0]
        if self.rate is not None:
            # A queued burst is still served at the rate; a nodelay burst is answered at once.
            free = self.burst if self.nodelay else 0
            bounds.append(max(0, len(requests) - 1 - free) / self.rate)
        if self.crawl_delay is not None:
            bounds.append((len(requests) - 1) * self.crawl_delay)
        if self.bytes_per_second is not None:
            at_once = self.connections or CRAWLER_PER_HOST
            bounds.append(sum(self.body_seconds(site.size(path)) for path in requests) / at_once)
            bounds.append(site.longest_chain(self.body_seconds))
        return max(bounds)

    def body_seconds(self, size: int) -> float:
        """How long nginx takes to send a body of ``size`` bytes under ``limit_rate``.

        Not size / rate: nginx 1.22 lets a response have rate x (whole seconds since it
        began + 1) bytes, on its whole-second clock, so the first second's worth goes
        at once and the rest in steps of a second (measured here: 97,527 bytes at
        16 KB/s in 5.02 s, 204,813 bytes at 192 KB/s in 1.00 s, 189,851 in 0.00 s)."""
        if self.bytes_per_second is None:
            return 0.0
        return float(size // self.bytes_per_second)


HOSTS: tuple[NginxHost, ...] = (
    NginxHost(
        "rate",
        "`limit_req` 3 r/s, no burst; 429 + `Retry-After: 1`",
        ("howto",),
        rate=3,
        retry_after=1,
    ),
    NginxHost(
        "burst",
        "`limit_req` 2 r/s, burst 10 `nodelay`; 429 + `Retry-After: 2`",
        ("whatsnew",),
        rate=2,
        burst=10,
        retry_after=2,
    ),
    NginxHost(
        "queue",
        "`limit_req` 3 r/s, burst 10 queued (answers wait); 429 without Retry-After",
        ("reference", "extending"),
        rate=3,
        burst=10,
        nodelay=False,
    ),
    NginxHost(
        "conn",
        "`limit_conn` 2 (503 above), bodies at 96 KB/s (`limit_rate`)",
        ("c-api",),
        connections=2,
        bytes_per_second=96 * 1024,
    ),
    NginxHost(
        "slow",
        "bodies at 16 KB/s (`limit_rate`), no other limit",
        ("tutorial",),
        bytes_per_second=16 * 1024,
    ),
    NginxHost(
        "polite",
        "robots.txt `Crawl-delay: 0.5`, `Disallow: /faq/windows`",
        ("faq",),
        crawl_delay=0.5,
        disallow=("/faq/windows",),
    ),
    NginxHost("open", "no limit", ("using", "installing", "distributing")),
)
