"""Ready-made farms, and the crawl time they physically allow.

The benchmark reports efficiency = possible / actual, so the bound must be one no crawler
can beat: each host's requests divided by what it serves without pushing back.
"""

from __future__ import annotations

import math

from sitefarm.spec import HostSpec, Redirect


def requests_needed(spec: HostSpec, *, robots: bool = True) -> float:
    """Requests a complete crawl of the host makes at least: every page, every redirect
    source, robots.txt when ``robots``; pages answered 500 at ``error_rate`` cost retries."""
    if spec.refused:
        return 0.0
    pages = len(spec.page_ids()) / (1.0 - min(spec.error_rate, 0.99))
    return pages + len(spec.redirects) + (1 if robots else 0)


def host_possible_seconds(spec: HostSpec, *, robots: bool = True) -> float:
    """The shortest time in which the host can serve a complete crawl without a single
    429 or 503, counted from the moment the farm starts serving.

    The largest of: one response's latency; rounds of ``min(capacity, soft_capacity)``
    concurrent requests at the mean latency (latency + jitter / 2); the token bucket's
    refill after its burst; the Crawl-delay between requests; all after ``pause_first``.
    Link discovery (a page is known only once a page linking it is fetched) and hangs are
    not counted, so real crawls stay above this bound.
    """
    count = requests_needed(spec, robots=robots)
    if count <= 0:
        return 0.0
    latency = spec.latency + spec.jitter / 2
    bounds = [latency]
    limits = [c for c in (spec.capacity, spec.soft_capacity) if c is not None]
    if limits:
        bounds.append(math.ceil(count / min(limits)) * latency)
    if spec.rate is not None:
        bounds.append(max(0.0, count - spec.burst) / spec.rate + spec.latency)
    crawl_delay = spec.robots_crawl_delay()
    if crawl_delay:
        bounds.append((count - 1) * crawl_delay + spec.latency)
    return spec.pause_first + max(bounds)


def possible_crawl_seconds(specs: list[HostSpec], *, robots: bool = True) -> float:
    """The farm's bound: hosts are crawled in parallel, so the slowest host's."""
    return max((host_possible_seconds(spec, robots=robots) for spec in specs), default=0.0)


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
    """Ten hosts, about 1,400 pages, each pushing back its own way; the possible crawl
    time is about 10 seconds, set by several hosts at once so that no single one decides
    the result."""
    names = [
        "fast",
        "slow",
        "bucket5",
        "bucket20",
        "narrow",
        "soft",
        "polite",
        "paused",
        "flaky",
        "hybrid",
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
            cross_links=ring("slow"),
            seed=12,
        ),
        HostSpec(
            name="bucket5",
            pages=50,
            latency=0.02,
            rate=5.0,
            burst=5,
            rate_retry_after="auto",
            cross_links=ring("bucket5"),
            seed=13,
        ),
        HostSpec(
            name="bucket20",
            pages=180,
            latency=0.02,
            rate=20.0,
            burst=10,
            rate_retry_after=2,
            tracking_links=True,
            cross_links=ring("bucket20"),
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
    ]
