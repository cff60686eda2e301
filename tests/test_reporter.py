"""The reporter: what a host's answers are told as, over a real crawler's stats
and signals, with a real controller on a fake clock."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from scrapy.utils.test import get_crawler

from scrapy_aimd import signals
from scrapy_aimd.core.controller import ControllerConfig, HostController, Reaction
from scrapy_aimd.events import DuplicateHosts
from scrapy_aimd.report import read_events
from scrapy_aimd.reporter import Reporter, duplicates_line

HOST = "a.test"


class Host:
    """A controller and the reporter it reports to, driven by a fake clock."""

    def __init__(self, tmp_path: Path) -> None:
        self.crawler = get_crawler()
        self.crawler.stats.open_spider()  # type: ignore[union-attr]
        self.sent: list[tuple[str, dict[str, Any]]] = []
        for name in ("host_throttled", "host_paused", "host_recovered"):
            self.crawler.signals.connect(
                self._catcher(name), signal=getattr(signals, name), weak=False
            )
        self.events_path = tmp_path / "events.jsonl"
        self.reporter = Reporter(self.crawler, events_file=str(self.events_path))
        self.controller = HostController(ControllerConfig(max_concurrency=1))
        self.now = 100.0
        self.reporter.open(self.now, "test")

    def _catcher(self, name: str) -> Any:
        def catch(**kwargs: Any) -> None:
            kwargs.pop("signal", None)
            kwargs.pop("sender", None)
            self.sent.append((name, kwargs))

        return catch

    def answer(
        self, status: int, *, latency: float = 0.05, retry_after: float | None = None
    ) -> None:
        self.now = max(self.now, self.controller.ready_at(self.now))
        ticket = self.controller.start(self.now)
        self.reporter.started(HOST, self.now, self.controller)
        self.now += latency
        before = (self.controller.delay, self.controller.concurrency)
        reaction = self.controller.finish(
            ticket, self.now, status=status, latency=latency, retry_after=retry_after
        )
        self.reporter.answered(
            HOST, self.now, reaction, self.controller, before, status=status, latency=latency
        )

    def close(self) -> list[dict[str, Any]]:
        self.reporter.close(self.now, "finished", [(HOST, self.controller)])
        lines = self.events_path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines]


def test_a_pause_is_told_then_its_end_then_the_recovery(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.answer(200)
    host.answer(429, retry_after=2.0)
    host.answer(200)  # starts after the pause
    events = host.close()
    names = [e["event"] for e in events if e.get("host") == HOST]
    assert names[:3] == ["start", "response", "start"]
    assert names.index("pause") < names.index("resume") < len(names) - 1
    assert [name for name, _ in host.sent] == ["host_throttled", "host_paused", "host_recovered"]
    assert host.sent[0][1]["reason"] == "429"
    assert host.sent[1][1]["seconds"] == pytest.approx(2.0)
    stats = host.crawler.stats
    assert stats is not None
    assert stats.get_value("aimd/throttle/429") == 1
    assert stats.get_value("aimd/pauses") == 1
    assert stats.get_value("aimd/started") == 3
    # The status is an int everywhere it is written.
    assert [e["status"] for e in events if e["event"] == "response"] == [200, 429, 200]


def test_a_pause_longer_than_the_crawl_counts_up_to_its_end(tmp_path: Path) -> None:
    """Overlapping pauses count once, and what would have gone on after the close
    is not counted: the crawl was not paused for it."""
    from scrapy_aimd.host_totals import HostTotals

    totals = HostTotals()
    totals.add({"event": "pause", "t": 1.0, "until": 11.0})
    totals.add({"event": "pause", "t": 5.0, "until": 61.0})
    totals.end(20.0)
    assert totals.paused_seconds == pytest.approx(19.0)
    totals.end(30.0)  # a second end changes nothing
    assert totals.paused_seconds == pytest.approx(19.0)

    host = Host(tmp_path)
    host.answer(200)
    host.answer(429, retry_after=60.0)
    host.now += 5.0
    events = host.close()
    assert events[-1]["hosts"][HOST]["paused_seconds"] == pytest.approx(5.0, abs=0.01)


def test_a_slow_good_answer_read_as_overload_is_a_latency_throttle(tmp_path: Path) -> None:
    host = Host(tmp_path)
    ticket = host.controller.start(host.now)
    host.reporter.started(HOST, host.now, host.controller)
    host.controller.cancel(ticket)
    # As the controller reads a latency spike (its own rule is tested with it).
    spike = Reaction(kind="overload", decreased=True)
    host.reporter.answered(HOST, host.now, spike, host.controller, (0.0, 1), status=200)
    events = host.close()
    stats = host.crawler.stats
    assert stats is not None
    assert stats.get_value("aimd/throttle/latency") == 1
    assert stats.get_value("aimd/throttle/200") is None
    assert [e["reason"] for e in events if e["event"] == "throttle"] == ["latency"]
    assert host.sent == [
        ("host_throttled", {"host": HOST, "reason": "latency", "delay": 0.0, "concurrency": 1})
    ]


def test_the_summary_is_the_fold_of_the_events_it_wrote(tmp_path: Path) -> None:
    host = Host(tmp_path)
    for status, retry_after in (
        (200, None),
        (503, None),
        (429, 1.0),
        (429, 3.0),
        (404, None),
        (200, None),
    ):
        host.answer(status, retry_after=retry_after)
    events = host.close()
    row = events[-1]["hosts"][HOST]
    counted = read_events(host.events_path).hosts[HOST].counted
    assert row["requests"] == counted.requests == 6
    assert row["responses"] == dict(counted.responses) == {"2xx": 2, "4xx": 3, "5xx": 1}
    assert row["throttles"] == counted.throttles == 3
    assert row["pauses"] == counted.pauses == 2
    assert row["paused_seconds"] == pytest.approx(counted.paused_seconds, abs=1e-3)
    # The close line's state is the controller's.
    assert (row["delay"], row["limit"]) == (host.controller.delay, host.controller.concurrency)


def test_a_crawl_delay_is_a_change_event(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.controller.set_crawl_delay(0.51)
    host.reporter.crawl_delay(HOST, host.now, 0.5, host.controller)
    events = host.close()
    change = next(e for e in events if e["event"] == "change")
    assert (change["crawl_delay"], change["delay"], change["limit"]) == (0.5, 0.51, 1)
    assert read_events(host.events_path).hosts[HOST].gap == [(0.0, 0.51)]


def test_the_close_line_carries_the_duplicates_and_robots_outcomes_are_read(
    tmp_path: Path,
) -> None:
    host = Host(tmp_path)
    host.crawler.stats.set_value("dupefilter/filtered", 7)  # type: ignore[union-attr]
    host.reporter.robots(host.now, "http://a.test", 200, "rules", 0.5)
    host.answer(200)
    events = host.close()
    assert events[-1]["duplicates"] == {"total": 7}
    crawl = read_events(host.events_path)
    assert crawl.duplicates == {"total": 7}
    (robots,) = crawl.robots.values()
    assert (robots.origin, robots.outcome, robots.status, robots.crawl_delay) == (
        "http://a.test",
        "rules",
        200,
        0.5,
    )


def test_the_close_line_and_the_log_say_the_duplicates_by_kind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host = Host(tmp_path)
    stats = host.crawler.stats
    assert stats is not None
    for key, value in {
        "dupefilter/filtered": 7,
        "aimd/dupefilter/filtered/exact": 4,
        "aimd/dupefilter/filtered/query_filter": 3,
        "aimd/dupefilter/filtered/fragment": 1,
    }.items():
        stats.set_value(key, value)
    host.answer(200)
    with caplog.at_level(logging.INFO, logger="scrapy_aimd.reporter"):
        events = host.close()
    kinds = {"total": 7, "exact": 4, "query_filter": 3, "fragment": 1}
    assert events[-1]["duplicates"] == kinds
    assert events[-1]["duplicate_hosts"] == {}  # no dupefilter of ours: not known
    assert read_events(host.events_path).duplicates == kinds
    (line,) = [r.getMessage() for r in caplog.records if "duplicate" in r.getMessage()]
    assert line == (
        "Filtered 7 duplicate requests: 4 exact, 3 query_filter, 1 fragment "
        "(a request changed by several stages counts under each)"
    )


def test_no_duplicates_no_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = Host(tmp_path)
    host.answer(200)
    with caplog.at_level(logging.INFO, logger="scrapy_aimd.reporter"):
        events = host.close()
    assert events[-1]["duplicates"] == {"total": 0}
    assert not [r for r in caplog.records if "duplicate" in r.getMessage()]


@pytest.mark.parametrize("template", ["%(nope)s.jsonl", "events%.jsonl", 3])
def test_an_events_file_name_that_cannot_be_filled_is_named_at_startup(
    tmp_path: Path, template: object
) -> None:
    from scrapy_aimd.settings import AimdSettingsError

    with pytest.raises(AimdSettingsError, match="AIMD_EVENTS_FILE"):
        Reporter(get_crawler(), events_file=template)  # type: ignore[arg-type]


def test_the_summary_shows_the_troubled_hosts_first_and_counts_the_rest() -> None:
    from scrapy_aimd.host_totals import HostTotals
    from scrapy_aimd.summary import format_summary

    rows = []
    for i in range(30):
        totals = HostTotals(requests=100 - i)
        rows.append((f"h{i:02}", totals))
    troubled = HostTotals(requests=3)
    for record in ({"event": "response", "t": 1.0, "status": 429}, {"event": "throttle", "t": 1.0}):
        troubled.add(record)
    rows.append(("zz-troubled", troubled))
    lines = format_summary(rows, max_rows=5).splitlines()
    assert " ".join(lines[0].split()[:10]) == "host requests 2xx 3xx 4xx 429 5xx 503 cached errors"
    assert lines[1].split()[0] == "zz-troubled"
    assert lines[1].split()[5] == "1" and lines[1].split()[4] == "0"
    assert [line.split()[0] for line in lines[2:6]] == ["h00", "h01", "h02", "h03"]
    assert (
        lines[6] == "... and 26 more hosts (2171 requests, 0 of them troubled); AIMD_SUMMARY_ROWS=5"
    )


def test_the_caveat_of_several_stages_only_when_the_kinds_add_up_to_more() -> None:
    assert duplicates_line({"total": 3, "exact": 3}, DuplicateHosts()) == (
        "Filtered 3 duplicate requests: 3 exact"
    )
    assert duplicates_line({"total": 3, "exact": 1, "fragment": 2}, DuplicateHosts()) == (
        "Filtered 3 duplicate requests: 1 exact, 2 fragment"
    )
    assert duplicates_line({"total": 3, "fragment": 2, "query_filter": 2}, DuplicateHosts()) == (
        "Filtered 3 duplicate requests: 2 fragment, 2 query_filter "
        "(a request changed by several stages counts under each)"
    )
