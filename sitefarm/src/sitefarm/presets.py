"""Ready-made farms, and the crawl time they physically allow.

The benchmark reports efficiency = possible / actual, so the bound must be one no crawler
can beat: each host's requests divided by what it serves without pushing back.
"""

from __future__ import annotations

import math

from sitefarm.spec import HostSpec, Redirect


def requests_needed(spec: HostSpec, *, robots: bool = True) -> float:
    """Requests a complete crawl of the host makes at least: every page, every redirect
    source and broken link, robots.txt when ``robots``; pages answered 500 at
    ``error_rate`` cost retries."""
    if spec.refused:
        return 0.0
    pages = len(spec.page_ids()) / (1.0 - min(spec.error_rate, 0.99))
    return pages + len(spec.redirects) + spec.broken_links + (1 if robots else 0)


def service_seconds(spec: HostSpec, *, robots: bool = True) -> list[float]:
    """The mean time to the first byte of each request ``requests_needed`` counts (the
    retries of 500s as a fraction of a request): pages at latency + jitter / 2, static
    pages and the fast answers (robots.txt, redirects, 404s) at ``fast_latency``."""
    if spec.refused:
        return []
    latency = spec.latency + spec.jitter / 2
    fast = latency if spec.fast_latency is None else spec.fast_latency
    static = spec.static_page_indices()
    retries = 1.0 / (1.0 - min(spec.error_rate, 0.99))
    pages = []
    for page in spec.page_ids():
        number = page[3:].partition("?")[0] if page.startswith("/p/") else ""
        pages.append(fast if number.isdigit() and int(number) in static else latency)
    others = len(spec.redirects) + spec.broken_links + (1 if robots else 0)
    return [t * retries for t in pages] + [fast] * others


def host_possible_seconds(spec: HostSpec, *, robots: bool = True) -> float:
    """The shortest time in which the host can serve a complete crawl without a single
    429 or 503, counted from the moment the farm's clock starts (``server.CLOCKS``).

    The largest of: one page's latency; rounds of ``min(capacity, soft_capacity)``
    concurrent requests at the mean latency (latency + jitter / 2), or, where answers take
    different times (``fast_latency``), the larger of the rounds of slow pages alone and
    the sum of all their times over that many (a queueing origin's ``workers`` count
    as a capacity); the token bucket's refill after its burst; a fixed window, a sliding
    window or a block's rate at ``limit`` requests a window, the last started in the
    last window needed; the Crawl-delay between requests; all after
    ``pause_first``, and plus the outage when the work is not done before it starts (the
    tokens a bucket gains during an outage are not counted). Link discovery (a page is
    known only once a page linking it is fetched) and hangs are not counted, so real
    crawls stay above this bound.
    """
    count = requests_needed(spec, robots=robots)
    if count <= 0:
        return 0.0
    latency = spec.latency + spec.jitter / 2
    bounds = [latency]  # the root is a page, never static
    limits = [c for c in (spec.capacity, spec.soft_capacity, spec.workers) if c is not None]
    if limits:
        if spec.fast_latency is None:
            bounds.append(math.ceil(count / min(limits)) * latency)
        else:
            times = service_seconds(spec, robots=robots)
            slow = sum(1 for t in times if t > spec.fast_latency) / min(limits)
            bounds += [math.ceil(slow) * latency, sum(times) / min(limits)]
    if spec.rate is not None:
        bounds.append(max(0.0, count - spec.burst) / spec.rate + spec.latency)
    for limit, seconds in (
        (spec.window_limit, spec.window_seconds),
        (spec.sliding_limit, spec.sliding_seconds),
        (spec.block_limit, spec.block_interval),
    ):
        if limit is not None:
            # ``limit`` requests a window: the last one starts in the last window.
            bounds.append((math.ceil(count / limit) - 1) * seconds + spec.latency)
    crawl_delay = spec.robots_crawl_delay()
    if crawl_delay:
        bounds.append((count - 1) * crawl_delay + spec.latency)
    work = spec.pause_first + max(bounds)
    if spec.outage_seconds and work > spec.outage_start:
        work += spec.outage_seconds
    return work


def possible_crawl_seconds(
    specs: list[HostSpec], *, robots: bool = True, concurrency: int | None = None
) -> float:
    """The farm's bound: hosts are crawled in parallel, so the slowest host's; with
    ``concurrency`` (the crawler's ``CONCURRENT_REQUESTS``), at least the whole farm's
    time to first byte spread over that many requests at once."""
    bound = max((host_possible_seconds(spec, robots=robots) for spec in specs), default=0.0)
    if concurrency is not None:
        work = sum(sum(service_seconds(spec, robots=robots)) for spec in specs)
        bound = max(bound, work / concurrency)
    return bound


def farm_page_ids(specs: list[HostSpec]) -> dict[str, list[str]]:
    """Host name -> the distinct pages a complete crawl fetches (compare with the log's
    "page" field of 200 responses)."""
    return {spec.name: spec.page_ids() for spec in specs}


def demo_farm() -> list[HostSpec]:
    """The example project's demo site: four hosts, about 200 pages, a crawl of roughly
    20 seconds at best."""
    return [
        HostSpec(
            name="fast",
            pages=80,
            latency=0.02,
            soft_capacity=8,
            tracking_links=True,
            query_pages=5,
            cross_links=["slow", "limited", "polite"],
            redirects=[Redirect("/old/3", "/p/3"), Redirect("/p/5/", "/p/5")],
            seed=1,
        ),
        HostSpec(name="slow", pages=30, latency=0.5, jitter=0.2, soft_capacity=4, seed=2),
        HostSpec(
            name="limited",
            pages=50,
            rate=4.0,
            burst=4,
            rate_retry_after="auto",
            latency=0.02,
            tracking_links=True,
            seed=3,
        ),
        HostSpec(
            name="polite",
            pages=30,
            latency=0.02,
            robots="User-agent: *\nDisallow: /private/\n",
            crawl_delay=0.5,
            sitemap=True,
            seed=4,
        ),
    ]


def benchmark_farm() -> list[HostSpec]:
    """Sixteen hosts, about 1,900 pages, each pushing back its own way or slow in a way a
    controller can misread; the possible crawl time is about 10 seconds, set by several
    hosts at once so that no single one decides the result.

    Besides the kinds of pushing back (a hard capacity answering 503, a soft one that
    slows down, token buckets with Retry-After in seconds or as an HTTP-date, a 429 pause
    at the start with a short fixed Retry-After, as most servers send it (``paused``),
    500s, a Crawl-delay), three hosts answer robots.txt, redirects and 404s in
    milliseconds while their pages take hundreds (``slow``, ``dynamic``, ``mixed``), one
    of them with half its pages static (``mixed``); ``outage`` answers 503 without
    Retry-After for 5 s once the crawl is under way, and ``bursty`` is a bucket of 20
    requests/s that also takes a burst of 20. Four hosts are the commonest limiters of
    APIs and front ends: a fixed window of 30 requests per 5 s answering a bare 429
    (``window``), the same window telling its quota in GitHub's ``X-RateLimit-*``
    headers (``quota``), an origin of 4 workers that queues instead of refusing
    (``queue``), and a block of 403s for 3 s after more than 10 requests in 2 s, renewed
    by every hit (``block``, as mod_evasive).
    """
    names = [
        "fast",
        "slow",
        "bursty",
        "narrow",
        "soft",
        "polite",
        "paused",
        "flaky",
        "hybrid",
        "dynamic",
        "mixed",
        "outage",
        "window",
        "queue",
        "block",
        "quota",
    ]

    def ring(name: str) -> list[str]:
        return [names[(names.index(name) + 1) % len(names)]]

    return [
        HostSpec(
            name="fast",
            pages=250,
            latency=0.02,
            capacity=8,
            tracking_links=True,
            query_pages=10,
            cross_links=ring("fast"),
            seed=11,
        ),
        HostSpec(
            name="slow",
            pages=80,
            latency=0.8,
            jitter=0.4,
            soft_capacity=10,
            fast_latency=0.005,
            cross_links=ring("slow"),
            seed=12,
        ),
        HostSpec(
            name="bursty",
            pages=180,
            latency=0.02,
            rate=20.0,
            burst=20,
            rate_retry_after=2,
            tracking_links=True,
            cross_links=ring("bursty"),
            seed=14,
        ),
        HostSpec(
            name="narrow",
            pages=150,
            latency=0.1,
            capacity=2,
            capacity_retry_after=1,
            cross_links=ring("narrow"),
            seed=15,
        ),
        HostSpec(
            name="soft",
            pages=200,
            latency=0.05,
            soft_capacity=4,
            capacity=12,
            capacity_retry_after="soon",
            cross_links=ring("soft"),
            seed=16,
        ),
        HostSpec(
            name="polite",
            pages=36,
            latency=0.02,
            crawl_delay=0.25,
            robots="User-agent: *\nDisallow: /private/\n",
            cross_links=ring("polite"),
            seed=17,
        ),
        HostSpec(
            name="paused",
            pages=150,
            latency=0.05,
            capacity=6,
            pause_first=3.0,
            pause_retry_after=1,
            cross_links=ring("paused"),
            seed=18,
        ),
        HostSpec(
            name="flaky",
            pages=150,
            latency=0.03,
            capacity=6,
            error_rate=0.02,
            tracking_links=True,
            cross_links=ring("flaky"),
            seed=19,
        ),
        HostSpec(
            name="hybrid",
            pages=100,
            latency=0.2,
            capacity=3,
            rate=10.0,
            burst=20,
            rate_retry_after="date",
            cross_links=ring("hybrid"),
            seed=20,
        ),
        HostSpec(
            name="dynamic",
            pages=16,
            latency=0.5,
            capacity=1,
            fast_latency=0.003,
            broken_links=3,
            redirects=[Redirect("/old/3", "/p/3"), Redirect("/p/5/", "/p/5")],
            robots="User-agent: *\nDisallow: /private/\n",
            cross_links=ring("dynamic"),
            seed=21,
        ),
        HostSpec(
            name="mixed",
            pages=150,
            latency=0.4,
            capacity=4,
            fast_latency=0.01,
            static_share=0.5,
            broken_links=2,
            cross_links=ring("mixed"),
            seed=22,
        ),
        HostSpec(
            name="outage",
            pages=150,
            latency=0.1,
            capacity=4,
            outage_start=3.0,
            outage_seconds=5.0,
            cross_links=ring("outage"),
            seed=23,
        ),
        HostSpec(
            name="window",
            pages=60,
            latency=0.02,
            broken_links=2,
            window_limit=30,
            window_seconds=5.0,
            window_retry_after=None,
            cross_links=ring("window"),
            seed=24,
        ),
        HostSpec(
            name="queue",
            pages=80,
            latency=0.4,
            workers=4,
            cross_links=ring("queue"),
            seed=25,
        ),
        HostSpec(
            name="block",
            pages=50,
            latency=0.02,
            block_limit=10,
            block_interval=2.0,
            block_seconds=3.0,
            cross_links=ring("block"),
            seed=26,
        ),
        HostSpec(
            name="quota",
            pages=60,
            latency=0.02,
            broken_links=2,
            window_limit=30,
            window_seconds=5.0,
            quota_headers="github",
            cross_links=ring("quota"),
            seed=27,
        ),
    ]


def limiter_farm() -> list[HostSpec]:
    """Six hosts, one for each kind of limiter that sites deploy and the benchmark farm
    lacks (DESIGN.md, "Limiters in the wild"), 60 to 80 pages each; every host's
    possible time is 8 to 12 s.

    ``window``: a fixed window of 30 requests per 5 s, 429 + Retry-After to the
    window's edge once spent; ``sliding``: more than 25 requests in the last 5 s,
    denied ones counted (HAProxy's ``sc_http_req_rate``), 429 without Retry-After;
    ``queue``: an origin of 4 workers of 0.4 s that never refuses (requests wait in a
    queue); ``block``: more than 10 requests in 2 s blocks for 3 s, 403, renewed by
    every hit (mod_evasive); ``github`` and ``ietf``: the fixed window, telling its
    quota in GitHub's ``X-RateLimit-*`` headers or the IETF draft's ``RateLimit-Policy``
    and ``RateLimit`` fields.
    """

    def windowed(name: str, seed: int, told: str | None = None) -> HostSpec:
        return HostSpec(
            name=name,
            pages=60,
            latency=0.02,
            broken_links=2,
            window_limit=30,
            window_seconds=5.0,
            quota_headers=told,
            seed=seed,
        )

    return [
        windowed("window", 31),
        HostSpec(
            name="sliding",
            pages=60,
            latency=0.02,
            sliding_limit=25,
            sliding_seconds=5.0,
            seed=32,
        ),
        HostSpec(name="queue", pages=80, latency=0.4, workers=4, seed=33),
        HostSpec(
            name="block",
            pages=60,
            latency=0.02,
            block_limit=10,
            block_interval=2.0,
            block_seconds=3.0,
            seed=34,
        ),
        windowed("github", 35, "github"),
        windowed("ietf", 36, "ietf"),
    ]
