"""Real crawls that tell a forbidden page from a blocked host by evidence: a page
that first answered 403 as a block began is fetched again until the block ends
(never handed on while its host serves nothing), a truly forbidden page goes to
the spider after two fetches without slowing its host, and a host left with
forbidden pages only, blocked, still ends."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from crawling import AIMD, CrawlResult, run_crawl
from local_http import Answer, serve

HTML = {"Content-Type": "text/html"}


@dataclass
class Site:
    """``pages`` pages; ``forbidden`` ones always answer 403. ``narrow``: the root
    links pages 0 and 1 and page i links i+1 and i+2 (a small frontier, as a
    paginated listing), else the root links them all. From the ``block_at``-th page
    request on (the root is the first) every page answers 403 for ``block_seconds``,
    renewed by every hit if ``renew`` (as mod_evasive); with ``block_when_done``
    it begins at the first request for a forbidden page once every other page was
    served. Pages take ``latency`` (the ``slow``-th page request 0.5 s); a 403 is
    immediate, as a firewall's."""

    pages: int
    forbidden: frozenset[int] = frozenset()
    narrow: bool = False
    block_at: int | None = None
    block_seconds: float = 3.0
    renew: bool = False
    block_when_done: bool = False
    latency: float = 0.05
    slow: int | None = None
    log: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: int = 0
    blocked_until: float = 0.0

    def answer(self, path: str) -> Answer:
        if path == "/robots.txt":
            return 404, HTML, b""
        with self.lock:
            now = time.monotonic()
            self.requests += 1
            forbidden = path in {page(i) for i in self.forbidden}
            done = len(self.served()) == 1 + self.pages - len(self.forbidden)
            if self.requests == self.block_at or (self.block_when_done and forbidden and done):
                self.blocked_until = max(self.blocked_until, now + self.block_seconds)
            status = 200
            if now < self.blocked_until:
                status = 403
                if self.renew:
                    self.blocked_until = now + self.block_seconds
            elif forbidden:
                status = 403
            self.log.append((path, status))
            latency = 0.5 if self.requests == self.slow else self.latency
        if status == 403:
            return status, HTML, b"forbidden"
        time.sleep(latency)
        return status, HTML, self.body(path).encode()

    def body(self, path: str) -> str:
        if path == "/":
            links = [0, 1] if self.narrow else range(self.pages)
        else:
            i = int(path.removeprefix("/p/").removesuffix(".html"))
            links = [j for j in (i + 1, i + 2) if j < self.pages] if self.narrow else []
        return "".join(f'<a href="{page(j)}">{j}</a>' for j in links)

    def fetches(self) -> Counter[str]:
        return Counter(path for path, _ in self.log)

    def served(self) -> Counter[str]:
        return Counter(path for path, status in self.log if status == 200)


def page(i: int) -> str:
    return f"/p/{i}.html"


def crawl(site: Site, out: Path, **settings: Any) -> CrawlResult:
    # 403s reach the spider's callback, so that the items say what was handed on.
    config = {**AIMD, "HTTPERROR_ALLOWED_CODES": [403], **settings}
    with serve(site.answer) as local:
        return run_crawl([local.url + "/"], out, config)


def handed_on(result: CrawlResult) -> Counter[str]:
    """The 403s the spider got, by path."""
    return Counter(item["url"].split("/", 3)[3] for item in result.items if item["status"] == 403)


@pytest.mark.parametrize("renew", [False, True], ids=["fixed", "renewed"])
def test_pages_refused_as_a_block_began_are_scraped_once_it_ends(
    tmp_path: Path, renew: bool
) -> None:
    """A paginated site that blocks for 3 s at its 20th page: the pages in flight
    then, and the ones after them, are all scraped once the block ends. The page
    before is slow, answered after the block's first 403s: no evidence that the
    host still serves (it was asked before them)."""
    site = Site(pages=40, narrow=True, block_at=20, block_seconds=3.0, renew=renew, slow=19)
    result = crawl(site, tmp_path / "crawl")
    refused = {path for path, status in site.log if status == 403}
    twice = {path for path in refused if sum(1 for p, s in site.log if (p, s) == (path, 403)) > 1}
    assert twice, site.log  # a page's second try fell inside the block
    assert set(site.served()) == {"/"} | {page(i) for i in range(40)}, site.log
    assert all(n == 1 for n in site.served().values())
    assert not handed_on(result)
    assert "aimd/forbidden" not in result.stats
    assert len(result.items) == 41
    assert result.stats["aimd/blocked/hosts"] >= 1


def test_a_forbidden_page_goes_to_the_spider_after_two_fetches_without_a_block(
    tmp_path: Path,
) -> None:
    forbidden = frozenset({5, 17, 29})
    site = Site(pages=40, forbidden=forbidden)
    result = crawl(site, tmp_path / "crawl")
    fetches = site.fetches()
    assert all(fetches[page(i)] == 2 for i in forbidden), fetches
    assert handed_on(result) == Counter({page(i)[1:]: 1 for i in forbidden})
    assert result.stats["aimd/forbidden"] == 3
    assert set(site.served()) == {"/"} | {page(i) for i in range(40) if i not in forbidden}
    assert "aimd/blocked/hosts" not in result.stats
    assert "aimd/pauses" not in result.stats
    assert "aimd/requeue/gave_up" not in result.stats


def test_forbidden_pages_fetched_again_at_the_end_are_not_read_as_a_block(
    tmp_path: Path,
) -> None:
    """Three forbidden pages in a row, early: each answer after the first two was a
    403, so they are tried again until their retries are spent, with nothing else
    left to ask. A block refuses pages it never refused: a run of such pages is no
    block, and their retries go at the host's pace, not a block's doubling waits."""
    forbidden = frozenset({3, 4, 5})
    site = Site(pages=30, forbidden=forbidden)
    started = time.monotonic()
    result = crawl(site, tmp_path / "crawl")
    elapsed = time.monotonic() - started
    fetches = site.fetches()
    assert all(2 <= fetches[page(i)] <= 1 + 10 for i in forbidden), fetches
    assert handed_on(result) == Counter({page(i)[1:]: 1 for i in forbidden})
    assert result.stats["aimd/forbidden"] == 3
    assert "aimd/blocked/hosts" not in result.stats
    assert "aimd/pauses" not in result.stats
    assert elapsed < 30  # a block's waits would sum to minutes


def test_a_blocked_host_left_with_forbidden_pages_only_ends(tmp_path: Path) -> None:
    """Once every other page is served, the first forbidden page blocks the host and
    every hit renews the block: nothing tells the two forbidden pages from blocked
    ones, so each is tried AIMD_THROTTLE_RETRIES more times, then handed on and
    counted."""
    forbidden = frozenset({20, 21})
    site = Site(pages=22, forbidden=forbidden, block_when_done=True, block_seconds=1.5, renew=True)
    started = time.monotonic()
    result = crawl(site, tmp_path / "crawl", AIMD_THROTTLE_RETRIES=3, AIMD_MAX_DELAY=2.0)
    elapsed = time.monotonic() - started
    fetches = site.fetches()
    assert all(fetches[page(i)] == 1 + 3 for i in forbidden), fetches
    assert handed_on(result) == Counter({page(i)[1:]: 1 for i in forbidden})
    assert result.stats["aimd/forbidden"] == 2
    assert result.stats["aimd/requeue/gave_up"] == 2
    assert result.stats["aimd/blocked/hosts"] >= 1
    assert site.served() == Counter({"/": 1} | {page(i): 1 for i in range(20)})
    assert elapsed < 60


def test_a_page_marked_by_another_process_is_tried_once_more_here(tmp_path: Path) -> None:
    """A mark's evidence is the process's own: a fleet worker, or a crawl resumed
    from its JOBDIR, fetches such a page twice itself before handing it on."""
    forbidden = frozenset({5, 15})
    site = Site(pages=30, forbidden=forbidden)
    with serve(site.answer) as local:
        result = run_crawl(
            [local.url + "/"],
            tmp_path / "crawl",
            {**AIMD, "HTTPERROR_ALLOWED_CODES": [403]},
            spider="components.MarkedElsewhereSpider",
        )
    fetches = site.fetches()
    assert all(fetches[page(i)] == 2 for i in forbidden), fetches
    assert handed_on(result) == Counter({page(i)[1:]: 1 for i in forbidden})
    assert result.stats["aimd/forbidden"] == 2
