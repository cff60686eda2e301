"""What one simulated host is and how it behaves: the farm's JSON-serialisable config."""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import random
import re
from dataclasses import dataclass, field
from typing import Any

#: Robots modes, after RFC 9309's cases a crawler must handle.
ROBOTS_MODES = (
    "normal",  # 200 with the body (404 when there is nothing to serve)
    "404",
    "503",  # unreachable forever
    "429",
    "503_then_200",  # 503 for the first ``robots_fail_first`` requests, then 200
    "redirect",  # a chain of ``robots_redirect_hops`` redirects to the real file
    "huge",  # the rules padded to ``robots_size`` bytes, ``robots_tail`` at the very end
    "garbage",  # the rules interleaved with random bytes and nonsense lines
)

#: How a fixed window may tell its quota (``HostSpec.quota_headers``).
QUOTA_HEADERS = ("github", "ietf")

#: The real query of a page's query variant (``/p/3?lang=en&view=full``), sorted by key.
QUERY_VARIANT: tuple[tuple[str, str], ...] = (("lang", "en"), ("view", "full"))

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_LOOPBACK = ipaddress.ip_network("127.0.0.0/8")

RetryAfter = float | str | None
"""A Retry-After setting: a number of seconds, "auto" (computed from the state), "date"
(an HTTP-date of the computed moment), None (no header) or any other string, sent verbatim
so that clients meet garbage such as "soon"."""


class SpecError(ValueError):
    """A host spec or farm config that cannot be served."""


@dataclass
class Redirect:
    """A request path that answers with a redirect instead of a page."""

    source: str
    """The path as requested, e.g. "/p/5/" or "/old/7" (tracking parameters are ignored)."""
    target: str
    """"/p/5" on the same host, "@name/p/2" on another farm host, or an absolute URL."""
    status: int = 301


@dataclass
class HostSpec:
    """One simulated host. Every behaviour is off by default and they combine."""

    name: str
    """Unique within the farm; letters, digits, "_" and "-"."""

    # -- where it listens
    address: str | None = None
    """A 127.0.0.0/8 address; None: the farm assigns 127.0.0.2 upwards."""
    port: int = 0
    """0: an ephemeral port, so that several farms can run at once."""
    hostname: str | None = None
    """A name used in URLs instead of the address (e.g. "localhost" with address
    127.0.0.1); the farm refuses to start unless it resolves to that address only. Links
    then spell the host in upper case as one of their variants."""
    refused: bool = False
    """Reserve the address and port but never listen: connections are refused."""

    # -- pages and links
    pages: int = 0
    """Pages /p/0 .. /p/{pages-1}; "/" lists entry links to them."""
    links_per_page: int = 4
    """Same-host links per page: i+1 and i+2 (so one failing page never cuts the chain),
    the rest chosen from ``seed``."""
    seed: int = 0
    cross_links: list[str] = field(default_factory=list)
    """Names of other farm hosts each page also links to (one page of each)."""
    tracking_links: bool = False
    """Links carry variants of the same page (utm_*, fbclid, gclid, fragments, case, default
    port, trailing slash, percent-encoding, query order, empty pairs, dot segments) and each
    page links one page twice; the server serves every variant as that page."""
    query_pages: int = 0
    """How many pages also exist as a distinct page /p/i?lang=en&view=full."""
    page_bytes: int = 0
    """Pad each HTML page to at least this many bytes."""

    # -- time to answer
    latency: float = 0.0
    """Seconds before the response headers of every admitted request."""
    jitter: float = 0.0
    """Plus a seeded uniform [0, jitter) seconds."""
    soft_capacity: int | None = None
    """Above this many concurrent requests latency scales by in_flight / soft_capacity:
    the host's throughput stays at soft_capacity / latency, as a busy server's does."""
    fast_latency: float | None = None
    """Seconds before the headers of what a real site answers from memory or static
    files while its pages are built: robots.txt, the sitemap, redirects, 404s and static
    pages (no jitter, no soft-capacity slowdown). None: ``latency`` like every answer."""
    static_share: float = 0.0
    """Fraction of the pages /p/i (a seeded choice, the root never) that are static,
    answered after ``fast_latency``: a host whose page latency depends on the path."""

    # -- pushing back: pause_first is checked first, then the outage, then the token
    # bucket (a request it refuses takes no token), then capacity. They apply to every
    # request, robots.txt included as a site's own limiter would, except that pause_first
    # and the outage spare robots.txt (the crawl's rules stay those it read first).
    capacity: int | None = None
    """Hard limit: a request arriving while this many are served gets 503 at once."""
    capacity_retry_after: RetryAfter = None
    """Retry-After on those 503s ("auto": the latency rounded up, at least 1)."""
    rate: float | None = None
    """Token bucket: tokens per second; a request without a token gets 429."""
    burst: int = 1
    """Token bucket size; it starts full when the farm starts serving."""
    rate_retry_after: RetryAfter = "auto"
    """Retry-After on those 429s ("auto": seconds until a token, rounded up)."""
    pause_first: float = 0.0
    """For this many seconds after the farm starts serving, every request but robots.txt
    gets 429."""
    pause_retry_after: RetryAfter = "auto"
    """Retry-After on those 429s ("auto": the remaining seconds, rounded up)."""
    outage_start: float = 0.0
    outage_seconds: float = 0.0
    """From ``outage_start`` seconds after the farm starts serving, for this many seconds,
    every request but robots.txt gets 503 at once ("outage" in the log); then the host is
    healthy again."""
    outage_retry_after: RetryAfter = None
    """Retry-After on those 503s ("auto": the outage's remaining seconds, rounded up)."""

    # -- the limiters sites deploy (checked after the outage, before the token bucket:
    # block, sliding window, fixed window). Like the others they count robots.txt.
    window_limit: int | None = None
    """Fixed window: this many admitted requests per ``window_seconds`` (windows counted
    from the farm's clock); once spent, 429 until the window's edge ("window" in the log).
    Refused requests do not count."""
    window_seconds: float = 60.0
    window_retry_after: RetryAfter = "auto"
    """Retry-After on those 429s ("auto": seconds to the window's edge, rounded up)."""
    quota_headers: str | None = None
    """A fixed window that tells its quota on every answer: "github" (``X-RateLimit-Limit``,
    ``-Remaining``, ``-Used``, ``-Reset`` in epoch seconds) or "ietf" (the draft's
    ``RateLimit-Policy`` and ``RateLimit`` structured fields)."""
    sliding_limit: int | None = None
    """Sliding window, as HAProxy's ``sc_http_req_rate(0) gt N``: a request is refused
    with ``sliding_status`` when more than this many requests arrived in the last
    ``sliding_seconds``, itself and the refused ones included, so a client that keeps
    knocking stays refused ("sliding" in the log)."""
    sliding_seconds: float = 10.0
    sliding_status: int = 429
    sliding_retry_after: RetryAfter = None
    workers: int | None = None
    """A queueing origin: this many requests are served at once and the others wait in
    a first-in, first-out queue. It never refuses; only the latency shows the queue."""
    block_limit: int | None = None
    """A block, as Apache's mod_evasive: more than this many requests within
    ``block_interval`` seconds blocks the client for ``block_seconds``; every request
    during a block gets 403 and renews it ("block" in the log)."""
    block_interval: float = 1.0
    block_seconds: float = 10.0

    # -- failures
    error_rate: float = 0.0
    """Fraction of page requests answered 500 (seeded)."""
    hang_paths: list[str] = field(default_factory=list)
    """Paths that wait ``hang_seconds`` (plus latency) before answering, to cause timeouts."""
    hang_rate: float = 0.0
    """Fraction of page requests that hang likewise (seeded)."""
    hang_seconds: float = 0.0
    reset_paths: list[str] = field(default_factory=list)
    """Paths whose connection is reset (TCP RST) instead of answered."""
    broken_links: int = 0
    """The root also links /missing/0 .. /missing/{n-1}, which answer 404."""

    # -- redirects
    redirects: list[Redirect] = field(default_factory=list)
    """The root links every source, so that a crawl meets each redirect."""

    # -- robots.txt and sitemap
    robots: str | None = None
    """The robots.txt body. None with no crawl_delay and no sitemap: 404."""
    robots_mode: str = "normal"
    robots_fail_first: int = 2
    robots_redirect_hops: int = 3
    robots_delay: float = 0.0
    """Extra seconds before robots.txt is answered (a slow robots.txt)."""
    robots_size: int = 1 << 20
    robots_tail: str = "Disallow: /p/1\n"
    """The huge file's last line: only a parser that reads past 500 KiB sees it."""
    crawl_delay: float | None = None
    """Adds "Crawl-delay" to the "User-agent: *" group of robots.txt (or makes that group)."""
    sitemap: bool = False
    """robots.txt lists /sitemap.xml, which lists every page."""

    def __post_init__(self) -> None:
        given: list[Any] = list(self.redirects)  # dicts when built from JSON
        self.redirects = [r if isinstance(r, Redirect) else Redirect(**r) for r in given]
        self.validate()

    def validate(self) -> None:
        """Reject what cannot be served, naming the host and the field."""

        def fail(message: str) -> None:
            raise SpecError(f"host {self.name!r}: {message}")

        if not isinstance(self.name, str) or not _NAME.match(self.name):
            fail("name must be letters, digits, '_' or '-'")
        if self.address is not None:
            try:
                address = ipaddress.ip_address(self.address)
            except ValueError:
                fail(f"address {self.address!r} is not an IP address")
            else:
                if address not in _LOOPBACK:
                    fail(f"address {self.address} is outside 127.0.0.0/8")
        if not 0 <= self.port <= 65535:
            fail(f"port {self.port} out of range")
        for name in (
            "pages", "links_per_page", "query_pages", "page_bytes", "burst", "broken_links",
        ):  # fmt: skip
            if getattr(self, name) < 0:
                fail(f"{name} must not be negative")
        if self.query_pages > self.pages:
            fail("query_pages must not exceed pages")
        for name in (
            "latency", "jitter", "pause_first", "hang_seconds", "robots_delay",
            "outage_start", "outage_seconds",
        ):  # fmt: skip
            if getattr(self, name) < 0:
                fail(f"{name} must not be negative")
        if self.fast_latency is not None and self.fast_latency < 0:
            fail("fast_latency must not be negative")
        for name in ("error_rate", "hang_rate", "static_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                fail(f"{name} must be within [0, 1]")
        for name in ("capacity", "soft_capacity"):
            value = getattr(self, name)
            if value is not None and value < 1:
                fail(f"{name} must be at least 1")
        if self.rate is not None and self.rate <= 0:
            fail("rate must be positive")
        if self.rate is not None and self.burst < 1:
            fail("burst must be at least 1")
        for name in ("window_limit", "sliding_limit", "workers", "block_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                fail(f"{name} must be at least 1")
        for name in ("window_seconds", "sliding_seconds", "block_interval", "block_seconds"):
            if not getattr(self, name) > 0:
                fail(f"{name} must be positive")
        if self.quota_headers not in (None, *QUOTA_HEADERS):
            fail(f"quota_headers {self.quota_headers!r} is not one of {', '.join(QUOTA_HEADERS)}")
        if self.quota_headers is not None and self.window_limit is None:
            fail("quota_headers tell a fixed window's quota: set window_limit")
        if not 400 <= self.sliding_status <= 599:
            fail(f"sliding_status {self.sliding_status} is not an error status")
        if self.crawl_delay is not None and self.crawl_delay < 0:
            fail("crawl_delay must not be negative")
        if self.robots_mode not in ROBOTS_MODES:
            fail(f"robots_mode {self.robots_mode!r} is not one of {', '.join(ROBOTS_MODES)}")
        for redirect in self.redirects:
            if not redirect.source.startswith("/"):
                fail(f"redirect source {redirect.source!r} must start with '/'")
            if redirect.status not in (301, 302, 303, 307, 308):
                fail(f"redirect status {redirect.status} is not a redirect")
            if not redirect.target.startswith(("/", "@", "http://", "https://")):
                fail(f"redirect target {redirect.target!r}: use /path, @host/path or a URL")

    # -- serialisation

    def to_dict(self) -> dict[str, Any]:
        """Only the fields that differ from the defaults, so configs stay readable."""
        result: dict[str, Any] = {"name": self.name}
        for spec_field in dataclasses.fields(self):
            value = getattr(self, spec_field.name)
            default = (
                spec_field.default_factory()
                if spec_field.default_factory is not dataclasses.MISSING
                else spec_field.default
            )
            if spec_field.name != "name" and value != default:
                result[spec_field.name] = (
                    [dataclasses.asdict(r) for r in value]
                    if spec_field.name == "redirects"
                    else copy.deepcopy(value)
                )
        return result

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostSpec:
        """Unknown keys are an error: a typo must not silently switch a behaviour off."""
        if not isinstance(data, dict):
            raise SpecError(f"a host spec must be a JSON object, not {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"host {data.get('name')!r}: unknown field(s) {', '.join(unknown)}")
        if "name" not in data:
            raise SpecError("a host spec needs a name")
        try:
            return cls(**data)
        except TypeError as error:
            raise SpecError(f"host {data.get('name')!r}: {error}") from None

    # -- the pages it serves

    def query_page_indices(self) -> list[int]:
        """Which pages also have a query variant (seeded, so both ends agree)."""
        rng = random.Random(f"{self.seed}/{self.name}/query")
        return sorted(rng.sample(range(self.pages), self.query_pages))

    def static_page_indices(self) -> set[int]:
        """Which pages are static (seeded, so both ends agree)."""
        rng = random.Random(f"{self.seed}/{self.name}/static")
        return set(rng.sample(range(self.pages), round(self.static_share * self.pages)))

    def redirect_sources(self) -> set[str]:
        return {r.source for r in self.redirects}

    def page_ids(self) -> list[str]:
        """Every distinct page a complete crawl fetches with status 200, as a path and
        sorted real query: "/", "/p/0", ..., "/p/3?lang=en&view=full"."""
        if self.refused:
            return []
        sources = self.redirect_sources()
        ids = ["/"] if "/" not in sources else []
        ids += [f"/p/{i}" for i in range(self.pages) if f"/p/{i}" not in sources]
        query = "&".join(f"{k}={v}" for k, v in QUERY_VARIANT)
        ids += [f"/p/{i}?{query}" for i in self.query_page_indices()]
        return ids

    def robots_crawl_delay(self) -> float | None:
        """The Crawl-delay robots.txt announces for "*": the field, else one in the body."""
        if self.crawl_delay is not None:
            return self.crawl_delay
        if self.robots is None:
            return None
        in_star_group = False
        group_started = False
        for raw in self.robots.splitlines():
            line = raw.split("#", 1)[0].strip()
            key, _, value = line.partition(":")
            key = key.strip().lower()
            if key == "user-agent":
                if group_started:
                    in_star_group = False
                    group_started = False
                in_star_group = in_star_group or value.strip() == "*"
            elif key:
                group_started = True
                if key == "crawl-delay" and in_star_group:
                    try:
                        return float(value.strip())
                    except ValueError:
                        return None
        return None


def specs_to_json(specs: list[HostSpec]) -> dict[str, Any]:
    return {"hosts": [spec.to_dict() for spec in specs]}


def specs_from_json(data: Any) -> list[HostSpec]:
    """Accepts {"hosts": [...]} or a bare list of host objects."""
    if isinstance(data, dict):
        data = data.get("hosts")
    if not isinstance(data, list):
        raise SpecError('a farm config is {"hosts": [host, ...]} or a list of hosts')
    specs = [HostSpec.from_dict(item) for item in data]
    validate_farm(specs)
    return specs


def validate_farm(specs: list[HostSpec]) -> None:
    """Checks across hosts: unique names and addresses, links and redirects to known hosts."""
    names = [spec.name for spec in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SpecError(f"duplicate host name(s): {', '.join(duplicates)}")
    addresses = [(s.address, s.port) for s in specs if s.address is not None and s.port]
    if len(addresses) != len(set(addresses)):
        raise SpecError("two hosts share an address and port")
    known = set(names)
    for spec in specs:
        for other in spec.cross_links:
            if other not in known:
                raise SpecError(f"host {spec.name!r}: cross_links names unknown host {other!r}")
        for redirect in spec.redirects:
            if redirect.target.startswith("@"):
                other = redirect.target[1:].split("/", 1)[0]
                if other not in known:
                    raise SpecError(
                        f"host {spec.name!r}: redirect {redirect.source} targets unknown"
                        f" host {other!r}"
                    )
