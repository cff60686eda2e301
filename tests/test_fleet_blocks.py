"""Blocks and told quotas in a fleet: crawl processes (``tests/crawlrunner.py``,
the real add-on) sharing a real redis-server child crawl one host of the farm
that blocks with 403 or tells its quota in ``X-RateLimit-*`` headers.

The farm's log is the judge: a told quota is kept by the fleet as a whole (no
request refused), and a block is shared (while it lasts the host sees one probe
at a time from the whole fleet, spaced by the growing wait, not one per worker).
Single-process crawls of the same hosts: tests/test_crawl_blocks.py.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fleetcrawl import FLEET, Worker, assert_finished, start_worker, urls_of, wait_for
from redis_server import REDIS_SERVER, SKIP_REASON, serve_url

from sitefarm import HostSpec, start_farm, summarize

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

redis_url = pytest.fixture(serve_url)

#: Workers in each fleet.
WORKERS = 3
#: The controller's first wait of a block (policy.DEFAULT_SPACING), a little less:
#: the fleet's probes are at least this far apart.
FIRST_WAIT = 0.9
#: A gap this long between two block answers means the fleet knew the block: the
#: answers before it were sent at the pace that brought the block on (more than
#: ``block_limit`` requests in ``block_interval``: 0.2 s apart on average).
PROBE_SILENCE = 0.6
#: Blocked seconds a fleet's workers may count beyond what the farm's log shows of
#: a block: the worker that began it counts up to its first start or answer that
#: finds the host unblocked, which may come after another worker's probe ended it
#: (up to 3.2 s after, in 4 runs; exact when its own probe ended the block).
BLOCK_SECONDS_MARGIN = 4.0


def crawl(spec: HostSpec, tmp_path: Path, redis_url: str) -> tuple[list[Worker], list[Any]]:
    """The fleet's crawl of ``spec``, and the farm's log in arrival order."""
    with start_farm([spec], max_seconds=120) as farm:
        fleet = [
            start_worker(urls_of(farm), tmp_path / f"w{n}", redis_url, FLEET)
            for n in range(WORKERS)
        ]
        wait_for(fleet, 90)
        log = farm.read_log()
    assert_finished(fleet)
    claims = [w.stats().get("aimd/fleet/claims", 0) for w in fleet]
    assert sum(1 for c in claims if c) >= 2, claims  # a fleet's crawl, not one worker's
    return fleet, sorted(log, key=lambda r: r["arrived"])


def assert_every_page_once(spec: HostSpec, log: list[dict[str, Any]]) -> None:
    summary = summarize(log, [spec])[spec.name]
    assert summary.pages_fetched == summary.pages_total, summary  # no page lost
    assert summary.duplicate_fetches == 0, summary


@pytest.mark.parametrize("told", ["github", "ietf"])
def test_a_told_quota_is_kept_by_the_fleet_as_a_whole(
    tmp_path: Path, redis_url: str, told: str
) -> None:
    """A fixed window of 20 requests per 4 s that tells its quota (GitHub's
    ``X-RateLimit-*``, or the IETF draft's ``RateLimit-Policy`` and
    ``RateLimit``): each worker's answers set the host's told pace in Redis, and
    every worker's claims keep to it. Without it the fleet learns the window by
    being refused."""
    limit, seconds = 20, 4.0
    spec = HostSpec(
        name="quota",
        pages=50,
        latency=0.02,
        window_limit=limit,
        window_seconds=seconds,
        quota_headers=told,
    )
    fleet, log = crawl(spec, tmp_path, redis_url)
    statuses = Counter(r["status"] for r in log)
    assert statuses == {200: len(log)}, statuses  # none refused
    assert_every_page_once(spec, log)
    # The fleet's pace over the whole crawl: the first window's quota at once,
    # then at most the window's rate.
    span = log[-1]["arrived"] - log[0]["arrived"]
    assert len(log) - limit <= limit / seconds * span, (len(log), span)
    # ... and not far below it: the quota is spent, not feared (51 requests
    # need 2 windows and part of a third; a shared machine's delays aside).
    assert span <= 4 * seconds, span
    read = [w.stats().get("aimd/quota/told", 0) for w in fleet]
    paced = [w.stats().get("aimd/quota/paced", 0) for w in fleet]
    assert sum(read) == len(log), read  # every answer told it (no robots.txt here)
    assert sum(1 for p in paced if p) >= 2, paced  # more than one worker kept to it
    assert not any(w.stats().get("aimd/quota/garbled") for w in fleet)


def block_episodes(log: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each block as the host saw it: its 403s, from the first after a page to the
    first page after them (the block's end, included)."""
    episodes: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    for record in log:
        if record["status"] == 403:
            current.append(record)
        elif current:
            episodes.append([*current, record])
            current = []
    assert not current, _shown(current)  # every block ended in a page
    return episodes


def test_a_block_is_shared_by_the_fleet_and_probed_once_at_a_time(
    tmp_path: Path, redis_url: str
) -> None:
    """More than 10 requests in 2 s block the client for 3 s, renewed by every
    hit (mod_evasive's way). The block is part of the host's state in Redis: the
    whole fleet stops, and one probe at a time goes, the wait doubling (1 s,
    2 s, 4 s) until the block has ended. Were it each worker's own, each would
    probe, and every probe would renew the block."""
    spec = HostSpec(
        name="block", pages=30, latency=0.02, block_limit=10, block_interval=2.0, block_seconds=3.0
    )
    fleet, log = crawl(spec, tmp_path, redis_url)
    episodes = block_episodes(log)
    assert episodes, Counter(r["status"] for r in log)
    for episode in episodes:
        gaps = [b["arrived"] - a["arrived"] for a, b in itertools.pairwise(episode)]
        # The run of 403s that showed the block (sent at the pace that brought it
        # on, with what was in flight), then the probes: the first comes after a
        # silence, and from there every request waits its turn.
        known = next((n for n, gap in enumerate(gaps) if gap >= PROBE_SILENCE), None)
        assert known is not None, _shown(episode)  # the fleet stopped
        # What the fleet sent before it knew: the run (policy.BLOCK_RUN, 4) and
        # at most the host's limit in flight more.
        assert known + 1 <= 4 + FLEET["AIMD_MAX_CONCURRENCY"], _shown(episode)
        probes = gaps[known:]
        assert all(gap >= FIRST_WAIT for gap in probes), _shown(episode)
        # The wait grows (or holds) from one probe to the next: no probe of
        # another worker in between.
        assert all(b >= 0.9 * a for a, b in itertools.pairwise(probes)), _shown(episode)
        for a, b in itertools.pairwise(episode[known:]):
            assert b["arrived"] >= a["finished"], _shown(episode)  # one at a time
    assert_every_page_once(spec, log)  # the requests answered 403 were queued again
    # Each block is counted once by the fleet: by the worker whose answer began it;
    # a worker whose probe is still blocked counts a probe, not a block.
    blocks = [w.stats().get("aimd/blocked/hosts", 0) for w in fleet]
    assert sum(blocks) == len(episodes), (blocks, len(episodes))
    # ... and its blocked seconds once: no more than the log shows, from the first
    # 403's arrival to the page that ended the block.
    seconds = [w.stats().get("aimd/blocked/seconds", 0.0) for w in fleet]
    shown = sum(e[-1]["finished"] - e[0]["arrived"] for e in episodes)
    assert sum(seconds) <= shown + BLOCK_SECONDS_MARGIN * len(episodes), (seconds, shown)


def _shown(records: list[dict[str, Any]]) -> list[tuple[float, int, str]]:
    """Records as (arrival after the first, status, path): for a failure's message."""
    first = records[0]["arrived"]
    return [(round(r["arrived"] - first, 3), r["status"], r["path"]) for r in records]
