"""The farm benchmark: its columns from hand-made logs, and a real run on a tiny farm
(figures are not judged, only that they are computed from what the farm saw)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sitefarm import HostSpec, possible_crawl_seconds, specs_to_json

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "bench_farm.py"


@pytest.fixture(scope="module")
def bench() -> Iterator[Any]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_farm

        yield bench_farm
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def record(
    path: str,
    status: int,
    arrived: float,
    *,
    page: str | None = None,
    reason: str | None = None,
    host: str = "site",
) -> dict[str, Any]:
    reason = reason or {200: "page", 404: "robots", 429: "rate", 503: "capacity"}[status]
    return {
        "host": host,
        "path": path,
        "page": page if page is not None else (path if status == 200 else None),
        "status": status,
        "reason": reason,
        "arrived": arrived,
        "finished": arrived + 0.01,
        "in_flight": 1,
    }


def test_columns_from_a_hand_made_log(bench: Any) -> None:
    specs = [HostSpec(name="site", pages=2, links_per_page=1, crawl_delay=0.5)]
    records = [
        record("/robots.txt", 404, 100.0),
        record("/", 200, 100.6),
        record("/p/0", 429, 101.2),
        record("/p/0", 503, 101.3),  # 0.1 s after the last: a Crawl-delay violation
        record("/p/0", 200, 102.0),
        record("/p/0?utm_source=x", 200, 102.6, page="/p/0"),  # a duplicate fetch
    ]
    run = bench.measure(
        "aimd",
        records,
        specs,
        opened=99.0,
        wall_seconds=5.0,
        finish_reason="finished",
        capped=False,
    )
    assert run.requests == 6
    assert (run.pages_fetched, run.pages_total) == (2, 3)  # /p/1 never fetched
    assert run.duplicate_fetches == 1
    assert run.throttled == 2
    assert run.throttled_share == pytest.approx(2 / 6)
    assert run.crawl_delay_violations == 1
    assert run.possible_seconds == pytest.approx(
        possible_crawl_seconds(specs, concurrency=bench.CONCURRENT_REQUESTS)
    )
    assert run.efficiency == pytest.approx(run.possible_seconds / 5.0)
    assert run.hosts["site"]["done_after"] == pytest.approx(102.61 - 99.0)
    # A host's time counts from the first request the farm saw, when its clock started.
    site = run.hosts["site"]
    assert site["actual_seconds"] == pytest.approx(102.61 - 100.0)
    assert site["possible_seconds"] == pytest.approx(possible_crawl_seconds(specs))
    assert site["ratio"] == pytest.approx(site["possible_seconds"] / (102.61 - 100.0))
    assert site["complete"] is False
    assert (run.outage_refused, run.throttled_outside_outage) == (0, 2)

    row = bench.median_row([run])
    assert bench.slow_hosts(row) == ["site"]  # incomplete, whatever its ratio
    judged = {t.text: t.met for t in bench.targets(row)}
    assert judged == {
        "all pages fetched": False,
        "every host at 0.75 of its possible time or better": False,
        "efficiency at least 0.85": run.efficiency >= 0.85,
        "429+503 outside an outage at most 2 % of requests": False,
        "no Crawl-delay violated (gaps between arrivals at the server)": False,
        "efficiency at least 3x AutoThrottle's": None,
    }


def test_an_outage_is_counted_apart_and_hosts_are_judged_by_their_ratio(bench: Any) -> None:
    specs = [
        HostSpec(name="down", pages=1, latency=0.5, outage_start=0.0, outage_seconds=1.0),
        HostSpec(name="up", pages=1, latency=0.5),
    ]
    records = [
        record("/", 503, 10.0, reason="outage", host="down"),
        record("/", 503, 10.2, reason="outage", host="down"),
        record("/", 200, 11.0, host="down"),
        record("/p/0", 200, 11.1, host="down"),
        record("/", 200, 10.1, host="up"),
        record("/p/0", 429, 10.3, host="up"),
        record("/p/0", 200, 20.0, host="up"),
    ]
    run = bench.measure(
        "aimd", records, specs, opened=9.0, wall_seconds=11.0, finish_reason="finished",
        capped=False,
    )  # fmt: skip
    assert (run.throttled, run.outage_refused, run.throttled_outside_outage) == (3, 2, 1)
    assert run.throttled_outside_outage_share == pytest.approx(1 / 7)
    assert run.hosts["down"]["actual_seconds"] == pytest.approx(1.11)
    assert run.hosts["down"]["ratio"] == pytest.approx(1.5 / 1.11)  # 0.5 s + the outage
    assert run.hosts["up"]["ratio"] == pytest.approx(0.5 / 10.01)
    assert run.hosts["up"]["complete"] and run.hosts["down"]["complete"]
    row = bench.median_row([run])
    assert bench.slow_hosts(row) == ["up"]
    assert row.throttled_outside_outage == 1
    table = bench.format_table({"aimd": row}, 1.5, 60.0)
    assert "| 429+503 received | 3 (42.9 %) |" in table
    assert "| 429+503 outside the outage | 1 (14.3 %) |" in table
    times = bench.format_host_times({"aimd": row})
    assert "| down | 1.50 | 1.1 (1.35) |" in times
    assert "| up | 0.50 | 10.0 (0.05) |" in times


def test_median_rows_and_the_ratio_to_autothrottle(bench: Any) -> None:
    def run(
        name: str, wall: float, throttled: int, *, capped: bool = False, violations: int = 0
    ) -> Any:
        return bench.CrawlRun(
            contender=name,
            wall_seconds=wall,
            capped=capped,
            finish_reason="closespider_timeout" if capped else "finished",
            requests=100,
            pages_fetched=90,
            pages_total=100,
            duplicate_fetches=0,
            throttled=throttled,
            outage_refused=0,
            over_capacity_seconds=0.0,
            crawl_delay_violations=violations,
            possible_seconds=10.0,
        )

    rows = {
        "autothrottle": bench.median_row(
            [
                run("autothrottle", 100.0, 30),
                run("autothrottle", 50.0, 10, capped=True),
                run("autothrottle", 80.0, 20),
            ]
        ),
        "aimd": bench.median_row(
            [run("aimd", 20.0, 1), run("aimd", 10.0, 3, violations=2), run("aimd", 12, 2)]
        ),
    }
    bench.compare_with_autothrottle(rows)
    assert rows["autothrottle"].wall_seconds == 80.0
    assert rows["autothrottle"].capped_runs == 1
    assert rows["aimd"].throttled == 2
    assert rows["aimd"].efficiency == pytest.approx(10 / 12)
    assert rows["aimd"].efficiency_vs_autothrottle == pytest.approx((10 / 12) / (10 / 80))
    table = bench.format_table(rows, 10.0, 60.0)
    assert "| wall time (s) | 80.0 (1/3 capped at 60) | 12.0 |" in table
    assert "| efficiency vs AutoThrottle | 1.0x | 6.7x |" in table
    # Politeness holds in every run, not in the median one.
    assert "| Crawl-delay violations | 0 | 0 (worst run 2) |" in table
    judged = {t.text: (t.met, t.value) for t in bench.targets(rows["aimd"])}
    assert judged["no Crawl-delay violated (gaps between arrivals at the server)"] == (
        False,
        "2 violations in the worst run",
    )
    assert judged["429+503 outside an outage at most 2 % of requests"] == (
        False,
        "3.0 % in the worst run",
    )
    assert judged["efficiency at least 3x AutoThrottle's"] == (True, "6.7x")


def tiny_farm(path: Path) -> list[HostSpec]:
    specs = [
        HostSpec(name="plain", pages=6, latency=0.01, tracking_links=True, cross_links=["polite"]),
        HostSpec(name="polite", pages=4, latency=0.01, crawl_delay=0.2),
    ]
    path.write_text(json.dumps(specs_to_json(specs)))
    return specs


def run_bench(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(BENCH), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_bench_farm_on_a_tiny_farm(tmp_path: Path) -> None:
    specs = tiny_farm(tmp_path / "farm.json")
    out = run_bench(
        "--farm",
        str(tmp_path / "farm.json"),
        "--cap",
        "30",
        "--json",
        str(tmp_path / "out.json"),
        "--keep",
        str(tmp_path / "logs"),
    )
    header = "|  | Scrapy defaults | Scrapy + AutoThrottle | scrapy-aimd |"
    assert header in out
    for label in ("wall time (s)", "pages fetched", "429+503 received", "Crawl-delay violations"):
        assert f"| {label} |" in out
    assert "scrapy-aimd against the targets:" in out
    assert "efficiency at least 3x AutoThrottle's" in out
    assert "| host | possible (s) | Scrapy defaults: actual (s) (ratio) |" in out
    assert "| polite | " in out

    report = json.loads((tmp_path / "out.json").read_text())
    total_pages = sum(len(spec.page_ids()) for spec in specs)
    assert report["possible_seconds"] == pytest.approx(
        possible_crawl_seconds(specs, concurrency=32)
    )
    for name, (run,) in report["runs"].items():
        # Recount from the farm's own log, independently of the summaries.
        farm_log = tmp_path / "logs" / f"{name}-1" / "farm.jsonl"
        records = [json.loads(line) for line in farm_log.read_text().splitlines()]
        assert run["requests"] == len(records)
        first = min(r["arrived"] for r in records)
        for host, figures in run["hosts"].items():
            last = max(r["finished"] for r in records if r["host"] == host)
            assert figures["actual_seconds"] == pytest.approx(last - first)
        assert run["throttled"] == sum(r["status"] in (429, 503) for r in records)
        fetched = {(r["host"], r["page"]) for r in records if r["status"] == 200 and r["page"]}
        assert run["pages_fetched"] == len(fetched) == total_pages, name
        assert run["pages_total"] == total_pages
        assert run["throttled_share"] == pytest.approx(run["throttled"] / run["requests"])
        assert run["efficiency"] == pytest.approx(run["possible_seconds"] / run["wall_seconds"])
        assert not run["capped"]
        assert report["median"][name]["wall_seconds"] == run["wall_seconds"]
    aimd, autothrottle = report["median"]["aimd"], report["median"]["autothrottle"]
    assert aimd["efficiency_vs_autothrottle"] == pytest.approx(
        aimd["efficiency"] / autothrottle["efficiency"]
    )
    assert aimd["crawl_delay_violations"] == 0  # stock Scrapy ignores Crawl-delay


def test_a_crawl_that_reaches_the_cap_is_reported_as_capped(tmp_path: Path) -> None:
    specs = [HostSpec(name="polite", pages=12, latency=0.01, crawl_delay=0.5)]
    (tmp_path / "farm.json").write_text(json.dumps(specs_to_json(specs)))
    out = run_bench(
        "--farm", str(tmp_path / "farm.json"), "--only", "aimd", "--cap", "2",
        "--json", str(tmp_path / "out.json"),
    )  # fmt: skip
    (run,) = json.loads((tmp_path / "out.json").read_text())["runs"]["aimd"]
    assert run["capped"]
    assert run["finish_reason"] == "closespider_timeout"
    assert run["pages_fetched"] < run["pages_total"]
    assert "(capped at 2)" in out
    assert "MISSED: all pages fetched" in out


def test_a_host_alone_has_no_limits_and_says_what_bounds_it(bench: Any) -> None:
    spec = HostSpec(
        name="busy", pages=20, latency=0.02, capacity=2, rate=5.0, burst=2, error_rate=0.1,
        pause_first=1.0, outage_start=1.0, outage_seconds=2.0, crawl_delay=0.5,
        cross_links=["other"],
    )  # fmt: skip
    alone = bench.unlimited(spec)
    assert (alone.capacity, alone.rate, alone.crawl_delay, alone.cross_links) == (
        None, None, None, [],
    )  # fmt: skip
    assert (alone.pause_first, alone.outage_seconds, alone.error_rate) == (0.0, 0.0, 0.0)
    assert alone.page_ids() == spec.page_ids()  # the same pages to fetch
    fast = HostSpec(name="fast", pages=100, latency=0.02, capacity=8)
    slow = HostSpec(name="slow", pages=10, latency=0.5, capacity=1)
    table = bench.format_alone({"fast": 1.1, "slow": 2.0}, [fast, slow])
    possible = bench.host_possible_seconds(fast)
    assert f"| fast | {possible:.2f} | 1.10 | {possible / 1.1:.2f} | the crawler's CPU |" in table
    assert f"| slow | {bench.host_possible_seconds(slow):.2f} | 2.00 | 1.00 | the host |" in table


def test_bench_farm_crawls_a_host_alone(tmp_path: Path) -> None:
    specs = [
        HostSpec(name="quick", pages=6, latency=0.01, capacity=2),
        HostSpec(name="other", pages=3, latency=0.01),
    ]
    (tmp_path / "farm.json").write_text(json.dumps(specs_to_json(specs)))
    out = run_bench(
        "--farm", str(tmp_path / "farm.json"), "--only", "aimd", "--cap", "20",
        "--alone", "quick", "--json", str(tmp_path / "out.json"),
    )  # fmt: skip
    assert "| host | possible (s) | alone, no limits (s) |" in out
    assert "| quick | " in out.split("alone, no limits")[1]
    report = json.loads((tmp_path / "out.json").read_text())
    assert set(report["alone_seconds"]) == {"quick"}
    assert report["alone_seconds"]["quick"] > 0


def test_set_gives_every_crawler_the_same_settings(bench: Any) -> None:
    args = bench.parse_args(["--set", "CONCURRENT_REQUESTS_PER_DOMAIN=16", "--set", "X=abc"])
    assert args.settings == {"CONCURRENT_REQUESTS_PER_DOMAIN": 16, "X": "abc"}
    chosen = bench.chosen_contenders(None, args.settings)
    assert [c.name for c in chosen] == list(bench.CONTENDERS)
    for contender in chosen:
        assert contender.settings["CONCURRENT_REQUESTS_PER_DOMAIN"] == 16
    assert chosen[-1].settings["ADDONS"] == {"scrapy_aimd.Addon": 500}
    with pytest.raises(SystemExit):
        bench.parse_args(["--set", "no value"])
