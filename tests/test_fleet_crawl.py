"""Fleet mode end to end: crawl processes (``tests/crawlrunner.py``, the real
add-on) on one farm, sharing a real redis-server child through AIMD_REDIS_URL.

What the farm's hosts saw is the judge: every page once, no host above the
limit, the Crawl-delay between arrivals. Timing bounds are generous: the
machine is shared.
"""

from __future__ import annotations

import datetime
import re
import signal
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from crawling import arrival_gaps
from fleetcrawl import FLEET, Worker, assert_finished, start_worker, urls_of, wait_for
from redis_server import REDIS_SERVER, SKIP_REASON, free_port, redis_server, serve_url
from slow_link import SlowLink

from sitefarm import FarmProcess, HostSpec, start_farm, summarize

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

redis_url = pytest.fixture(serve_url)


def page_records(log: list[dict[str, Any]], host: str | None = None) -> list[dict[str, Any]]:
    return [r for r in log if r["reason"] != "robots" and host in (None, r["host"])]


def workers(
    farm: FarmProcess, tmp_path: Path, url: str, count: int, settings: dict[str, Any]
) -> list[Worker]:
    return [
        start_worker(urls_of(farm), tmp_path / f"w{n}", url, {**FLEET, **settings})
        for n in range(count)
    ]


def wait_for_requests(farm: FarmProcess, count: int, timeout: float = 30) -> None:
    """Until the farm has seen ``count`` requests (bounded)."""
    deadline = time.monotonic() + timeout
    while len(farm.read_log()) < count and time.monotonic() < deadline:
        time.sleep(0.02)


def test_three_workers_fetch_every_page_once_and_keep_each_hosts_limit(
    tmp_path: Path, redis_url: str
) -> None:
    specs = [HostSpec(name=f"h{n}", pages=25, latency=0.15, jitter=0.05) for n in range(3)]
    with start_farm(specs, max_seconds=120) as farm:
        fleet = workers(farm, tmp_path, redis_url, 3, {})
        wait_for(fleet, 90)
        log = farm.read_log()
    assert_finished(fleet)
    for name, summary in summarize(log, specs).items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
        assert summary.duplicate_fetches == 0, (name, summary)
        # One limit for the fleet, not one per worker.
        assert summary.max_in_flight <= FLEET["AIMD_MAX_CONCURRENCY"], (name, summary)
    claims = [w.stats().get("aimd/fleet/claims", 0) for w in fleet]
    assert sum(claims) == len(page_records(log))
    # Scrapy's own scheduler stats, as a single process writes them.
    for worker in fleet:
        stats = worker.stats()
        assert stats["scheduler/enqueued"] == stats["aimd/enqueued"], stats
        assert stats["scheduler/enqueued/redis"] == stats["scheduler/enqueued"], stats
        assert stats.get("scheduler/dequeued", 0) == stats.get(
            "scheduler/dequeued/redis", 0
        ) + stats.get("scheduler/dequeued/memory", 0), stats
    assert sum(w.stats().get("scheduler/dequeued/redis", 0) for w in fleet) == sum(claims)
    assert sum(1 for c in claims if c) >= 2, claims  # the work is shared
    # The start URLs were sent by every worker and fetched once.
    assert sum(w.stats().get("aimd/fleet/duplicates", 0) for w in fleet) >= 2 * len(specs)
    # Every worker's events name it.
    for worker in fleet:
        name, events = worker.stats()["aimd/fleet/worker"], worker.events()
        assert events and all(e.get("worker") == name for e in events)
        assert "does not filter in a fleet" not in worker.log()  # scrapy-aimd's own filter


def test_a_crawl_delay_holds_across_the_workers(tmp_path: Path, redis_url: str) -> None:
    delay = 0.4
    specs = [HostSpec(name="slowly", pages=8, crawl_delay=delay), HostSpec(name="free", pages=20)]
    with start_farm(specs, max_seconds=120) as farm:
        fleet = workers(farm, tmp_path, redis_url, 3, {"ROBOTSTXT_OBEY": True})
        wait_for(fleet, 90)
        log = farm.read_log()
    assert_finished(fleet)
    summary = summarize(log, specs)
    assert summary["slowly"].pages_fetched == summary["slowly"].pages_total
    # The pages, as the server saw them arrive: never closer than the delay (a
    # little jitter aside), whichever worker sent them.
    gaps = arrival_gaps(page_records(log, "slowly"))
    assert gaps and min(gaps) >= delay - 0.1, gaps
    # One worker fetches robots.txt for the fleet, holding a place on the host
    # as a page would, and its Crawl-delay holds every page after it; the other
    # workers read its answer from Redis.
    records = [r for r in log if r["host"] == "slowly"]
    assert summary["slowly"].max_in_flight == 1, summary["slowly"]
    for name in ("slowly", "free"):
        assert sum(1 for r in log if (r["host"], r["path"]) == (name, "/robots.txt")) == 1
    assert sum(w.stats().get("aimd/fleet/robots/shared", 0) for w in fleet) == 2 * len(specs)
    gaps = arrival_gaps(records)
    assert min(gaps) >= delay - 0.1, gaps


def test_a_crawl_delay_holds_across_the_workers_when_new_connections_are_slow(
    tmp_path: Path, redis_url: str
) -> None:
    """Each worker opens its own connection to the host, and a request on a new
    one reaches the host a handshake after its send (TCP and TLS to a distant
    site): the gap another worker waits counts from no earlier than that."""
    delay, handshake = 0.5, 0.1  # the delay's 2 % margin (10 ms) takes the relay's jitter
    specs = [HostSpec(name="slowly", pages=8, crawl_delay=delay, latency=0.01)]
    with start_farm(specs, max_seconds=120) as farm:
        site = urlsplit(farm.urls["slowly"])
        assert site.hostname is not None and site.port is not None
        with SlowLink((site.hostname, site.port), handshake=handshake) as link:
            fleet = [
                start_worker(
                    [f"http://127.0.0.1:{link.port}/"],
                    tmp_path / f"w{n}",
                    redis_url,
                    {**FLEET, "ROBOTSTXT_OBEY": True},
                )
                for n in range(3)
            ]
            wait_for(fleet, 90)
        log = farm.read_log()
    assert_finished(fleet)
    summary = summarize(log, specs)["slowly"]
    assert summary.pages_fetched == summary.pages_total
    gaps = arrival_gaps(log)
    assert min(gaps) >= delay, f"Crawl-delay {delay} s broken: {[round(g, 4) for g in gaps]}"


def test_a_request_given_another_hosts_meta_goes_by_its_own_host(
    tmp_path: Path, redis_url: str
) -> None:
    # Links from "first" to "delayed" carry first's meta, its download_slot with it.
    delay = 0.5
    specs = [
        HostSpec(name="first", pages=4, links_per_page=2, cross_links=["delayed"]),
        HostSpec(name="delayed", pages=6, links_per_page=2, crawl_delay=delay),
    ]
    with start_farm(specs, max_seconds=120) as farm:
        worker = start_worker(
            [farm.urls["first"] + "/"],
            tmp_path / "w0",
            redis_url,
            {**FLEET, "ROBOTSTXT_OBEY": True},
            spider="components.MetaCarryingSpider",
        )
        wait_for([worker], 90)
        log = farm.read_log()
    assert_finished([worker])
    delayed = page_records(log, "delayed")
    assert len(delayed) >= 5
    gaps = arrival_gaps(delayed)
    assert min(gaps) >= delay - 0.1, gaps  # delayed's own Crawl-delay, not first's none
    hosts = {e["host"] for e in worker.events() if e["event"] == "start"}
    assert len(hosts) == 2, hosts  # each request started on its own host's state


def test_a_callback_slower_than_its_lease_keeps_its_request(tmp_path: Path, redis_url: str) -> None:
    # DOWNLOAD_TIMEOUT 3: a lease holds 8 s after its answer; the callback takes 10.
    specs = [HostSpec(name="site", pages=3, links_per_page=2)]
    with start_farm(specs, max_seconds=120) as farm:
        worker = start_worker(
            urls_of(farm), tmp_path / "w0", redis_url, FLEET, spider="components.SlowCallbackSpider"
        )
        wait_for([worker], 60)
        log = farm.read_log()
    assert_finished([worker])
    assert [r["path"] for r in page_records(log)].count("/") == 1
    assert worker.stats().get("aimd/fleet/renewed", 0) >= 1
    assert worker.stats().get("aimd/fleet/reaped", 0) == 0


def test_kill_9_of_one_worker_of_three_loses_no_page(tmp_path: Path, redis_url: str) -> None:
    specs = [HostSpec(name=f"h{n}", pages=30, latency=0.2) for n in range(3)]
    with start_farm(specs, max_seconds=120) as farm:
        # The one to kill starts first: it is surely at work when the others join.
        fleet = workers(farm, tmp_path, redis_url, 1, {})
        wait_for_requests(farm, 10)
        fleet += [start_worker(urls_of(farm), tmp_path / f"w{n}", redis_url, FLEET) for n in (1, 2)]
        wait_for_requests(farm, 25)
        fleet[0].process.send_signal(signal.SIGKILL)
        wait_for(fleet, 90)
        log = farm.read_log()
    assert fleet[0].code == -signal.SIGKILL
    assert_finished(fleet[1:])
    summaries = summarize(log, specs)
    for name, summary in summaries.items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
    # Fetched twice: at most what the killed worker held (its leases, which
    # expired: requests in flight, and answered ones whose callbacks had not run).
    reaped = sum(w.stats().get("aimd/fleet/reaped", 0) for w in fleet[1:])
    twice = sum(s.duplicate_fetches for s in summaries.values())
    assert reaped > 0 and twice <= reaped, (twice, reaped)
    # Their return is said (the wait before it: test_fleet_scheduler.py).
    assert any("leases of other workers came back" in w.log() for w in fleet[1:])


def test_a_dead_workers_hosts_resume_within_seconds_at_scrapys_timeout(
    tmp_path: Path, redis_url: str
) -> None:
    """At Scrapy's default DOWNLOAD_TIMEOUT of 180 s a lease holds 210 s; a
    killed worker's heartbeat expires within seconds, and the next claim of
    another worker puts its leases back: its requests are fetched again, and
    its hosts' places freed, well before the lease would have run out."""
    settings = {"DOWNLOAD_TIMEOUT": 180}
    specs = [HostSpec(name=f"h{n}", pages=40, latency=0.3) for n in range(3)]
    with start_farm(specs, max_seconds=150) as farm:
        fleet = workers(farm, tmp_path, redis_url, 1, settings)
        wait_for_requests(farm, 10)
        fleet += [
            start_worker(urls_of(farm), tmp_path / f"w{n}", redis_url, {**FLEET, **settings})
            for n in (1, 2)
        ]
        wait_for_requests(farm, 30)
        fleet[0].process.send_signal(signal.SIGKILL)
        killed_at = time.time()
        wait_for(fleet, 90)  # far below the 210 s of a lease
        log = farm.read_log()
    assert fleet[0].code == -signal.SIGKILL
    assert_finished(fleet[1:])
    summaries = summarize(log, specs)
    for name, summary in summaries.items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
    reaped = sum(w.stats().get("aimd/fleet/reaped", 0) for w in fleet[1:])
    assert reaped > 0
    # Each page the dead worker held is fetched again within 15 s of the kill.
    arrivals: dict[tuple[str, str], list[float]] = {}
    for record in page_records(log):
        arrivals.setdefault((record["host"], record["path"]), []).append(record["arrived"])
    again = [max(times) - killed_at for times in arrivals.values() if len(times) > 1]
    assert again and max(again) <= 15, again
    # And every host goes on within 15 s.
    for spec in specs:
        after = [r["arrived"] for r in page_records(log, spec.name) if r["arrived"] > killed_at]
        if after:
            assert min(after) - killed_at <= 15, (spec.name, min(after) - killed_at)


def test_a_worker_that_joins_later_starts_at_once(tmp_path: Path, redis_url: str) -> None:
    # Each worker downloads 2 at a time: the hosts' limits (3 each) leave room.
    settings = {"CONCURRENT_REQUESTS": 2}
    specs = [HostSpec(name=f"h{n}", pages=40, latency=0.25) for n in range(2)]
    with start_farm(specs, max_seconds=120) as farm:
        fleet = workers(farm, tmp_path, redis_url, 1, settings)
        wait_for_requests(farm, 10)
        late = start_worker(urls_of(farm), tmp_path / "late", redis_url, {**FLEET, **settings})
        wait_for([*fleet, late], 90)
        log = farm.read_log()
    assert_finished([*fleet, late])
    for name, summary in summarize(log, specs).items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
    starts = [e["t"] for e in late.events() if e["event"] == "start"]
    assert starts, late.log()[-3000:]
    assert starts[0] < 5.0, starts[:3]


def test_the_fleet_closes_after_its_idle_time(tmp_path: Path, redis_url: str) -> None:
    idle = 2.0
    specs = [HostSpec(name="h", pages=10)]
    with start_farm(specs, max_seconds=120) as farm:
        fleet = workers(farm, tmp_path, redis_url, 2, {"AIMD_FLEET_IDLE_CLOSE": idle})
        wait_for(fleet, 90)
        log = farm.read_log()
    assert_finished(fleet)
    last = max(r["finished"] for r in log)
    for worker in fleet:
        finished = datetime.datetime.fromisoformat(worker.stats()["finish_time"]).timestamp()
        assert idle - 0.5 <= finished - last <= idle + 6.0, finished - last


def test_a_worker_of_a_finished_fleet_says_why_it_fetched_nothing(
    tmp_path: Path, redis_url: str
) -> None:
    """The seen set of a finished crawl stays in Redis: the same crawl again
    fetches nothing, and says so, with the way to reset."""
    specs = [HostSpec(name="h", pages=6)]
    settings = {"AIMD_FLEET_IDLE_CLOSE": 1.0}
    with start_farm(specs, max_seconds=120) as farm:
        first = workers(farm, tmp_path / "first", redis_url, 1, settings)
        wait_for(first, 90)
        again = workers(farm, tmp_path / "again", redis_url, 1, settings)
        wait_for(again, 90)
    assert_finished([*first, *again])
    assert "fetched nothing" not in first[0].log()
    assert "fetched nothing: the fleet under" in again[0].log(), again[0].log()[-3000:]
    assert "clear_fleet" in again[0].log()


def test_jobdir_with_a_fleet_is_refused_at_startup(tmp_path: Path, redis_url: str) -> None:
    worker = start_worker(
        ["http://127.0.0.1:9/"], tmp_path / "w", redis_url, {"JOBDIR": str(tmp_path / "job")}
    )
    wait_for([worker], 60)
    assert worker.code != 0
    said = worker.stderr + worker.log()
    assert "AimdSettingsError: Invalid setting AIMD_REDIS_URL" in said, said[-3000:]
    assert "no JOBDIR with it" in said
    # Refused before anything of the JOBDIR was read or written.
    assert not (tmp_path / "job").exists() or not list((tmp_path / "job").iterdir())


def test_a_stock_jobdir_with_a_fleet_is_refused_as_a_fleet_and_left_as_it_was(
    tmp_path: Path, redis_url: str
) -> None:
    """The refusal is the fleet's (no JOBDIR with AIMD_REDIS_URL), not the
    JOBDIR's own check of a directory that another scheduler wrote."""
    job = tmp_path / "job"
    (job / "requests.queue").mkdir(parents=True)
    (job / "requests.seen").write_text("0123456789abcdef\n")
    before = sorted(p.name for p in job.rglob("*"))
    worker = start_worker(["http://127.0.0.1:9/"], tmp_path / "w", redis_url, {"JOBDIR": str(job)})
    wait_for([worker], 60)
    assert worker.code != 0
    said = worker.stderr + worker.log()
    assert "no JOBDIR with it" in said, said[-3000:]
    assert sorted(p.name for p in job.rglob("*")) == before


def test_redis_unreachable_at_startup_names_the_setting(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    worker = start_worker(["http://127.0.0.1:9/"], tmp_path / "w", url)
    wait_for([worker], 60)
    assert worker.code != 0
    said = worker.stderr + worker.log()
    assert f"Cannot reach Redis at AIMD_REDIS_URL='{url}'" in said, said[-3000:]
    # Raised as the engine is made: not buried under the engine's own errors.
    assert "Engine slot not assigned" not in said, said[-3000:]


def test_redis_lost_mid_crawl_stops_the_worker_cleanly(tmp_path: Path) -> None:
    specs = [HostSpec(name="h", pages=200, latency=0.2)]
    with redis_server() as server, start_farm(specs, max_seconds=120) as farm:
        fleet = workers(farm, tmp_path, server.url, 1, {})
        wait_for_requests(farm, 5)
        server.stop()
        wait_for(fleet, 60)
    worker = fleet[0]
    assert worker.code == 0, worker.stderr[-3000:]
    assert worker.stats().get("finish_reason") == "aimd_redis_lost"
    assert "ERROR" in worker.log() and "Stopping this fleet worker" in worker.log()
    assert "Traceback" not in worker.log()


def test_a_redis_lost_and_back_loses_no_request(tmp_path: Path) -> None:
    """Redis killed mid-crawl (SIGKILL, its append-only file synced at every
    write) stops the worker; the same Redis started again from its file has every
    request the worker held, leased: their leases expire, and a worker started on
    it fetches them and the rest. Every page once, but for what the first worker
    had in flight."""
    specs = [HostSpec(name="h", pages=60, latency=0.2)]
    with (
        redis_server("--appendonly", "yes", "--appendfsync", "always") as server,
        start_farm(specs, max_seconds=120) as farm,
    ):
        first = workers(farm, tmp_path / "first", server.url, 1, {})
        wait_for_requests(farm, 15)
        server.kill()
        wait_for(first, 60)
        server.start()  # the same port and directory: its append-only file
        second = workers(farm, tmp_path / "second", server.url, 1, {})
        wait_for(second, 90)
        log = farm.read_log()
    assert first[0].stats().get("finish_reason") == "aimd_redis_lost"
    assert_finished(second)
    summary = summarize(log, specs)["h"]
    assert summary.pages_fetched == summary.pages_total, summary
    reaped = second[0].stats().get("aimd/fleet/reaped", 0)
    assert reaped > 0, second[0].stats()  # the first worker's leases came back
    assert summary.duplicate_fetches <= reaped, summary


def test_the_fleet_counts_are_in_the_stats_during_the_crawl(tmp_path: Path, redis_url: str) -> None:
    """Scrapy's periodic stats (and any monitoring that reads the stats while the
    crawl runs) see the worker's ``aimd/fleet/*`` counts, not only at close."""
    periodic = {
        "EXTENSIONS": {"scrapy.extensions.periodic_log.PeriodicLog": 0},
        "LOGSTATS_INTERVAL": 0.5,
        "PERIODIC_LOG_STATS": {"include": ["aimd/fleet/claims"]},
    }
    # Pages enough to claim for seconds (slow start at 0.1 s pages reaches 60 within
    # about 1 s, the first write of the counts): a line must fall while claiming.
    specs = [HostSpec(name="h", pages=200, latency=0.1)]
    with start_farm(specs, max_seconds=120) as farm:
        fleet = workers(farm, tmp_path, redis_url, 1, periodic)
        wait_for(fleet, 90)
    assert_finished(fleet)
    log = fleet[0].log()
    during = log[: log.index("Closing spider")]
    counts = [int(n) for n in re.findall(r'"aimd/fleet/claims": (\d+)', during)]
    final = fleet[0].stats()["aimd/fleet/claims"]
    assert any(0 < count < final for count in counts), (counts, final, during[-3000:])


def test_a_refused_start_page_is_queued_again_and_fetched(tmp_path: Path, redis_url: str) -> None:
    """A start request sent again after a 429 keeps its meta: it is not taken for
    the repeat of another worker's start request."""
    specs = [HostSpec(name="paused", pages=6, pause_first=5.0, pause_retry_after=1)]
    with start_farm(specs, max_seconds=120) as farm:
        fleet = workers(farm, tmp_path, redis_url, 2, {})
        wait_for(fleet, 90)
        log = farm.read_log()
    assert_finished(fleet)
    summary = summarize(log, specs)["paused"]
    assert summary.throttled >= 1
    assert summary.pages_fetched == summary.pages_total, summary
    # Pauses are counted on the worker's clock, not the Redis server's.
    paused = [worker.stats().get("aimd/pause_seconds", 0) for worker in fleet]
    assert any(paused) and all(0 <= seconds < 120 for seconds in paused), paused


def test_a_worker_needs_fewer_round_trips_than_requests(tmp_path: Path, redis_url: str) -> None:
    """A worker's claims of one reactor turn share a script, and its answers,
    sends, pushes and leases done go with its next claim: fewer Redis round trips
    than requests (each request took a claim, a feedback and a share of pushes
    and dones, about 2.3, before)."""
    specs = [HostSpec(name=f"r{n}", pages=40, latency=0.005, seed=n) for n in range(4)]
    settings = {"ROBOTSTXT_OBEY": False, "CONCURRENT_REQUESTS": 16, "AIMD_MAX_CONCURRENCY": 8}
    with start_farm(specs, max_seconds=120) as farm:
        (worker,) = workers(farm, tmp_path, redis_url, 1, settings)
        wait_for([worker], 90)
        log = farm.read_log()
    assert_finished([worker])
    for name, summary in summarize(log, specs).items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
    stats = worker.stats()
    answered = stats["response_received_count"]
    assert answered == len(log)
    assert stats["aimd/fleet/feedbacks"] == answered
    assert stats["aimd/fleet/round_trips"] < answered, stats
