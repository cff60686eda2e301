"""What the dupefilter says about its duplicates: how many by kind (the
canonicalizer's stages that changed the URL, or "exact"), and the hosts that
had the most, in bounded memory."""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import Request, Spider
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from scrapy_aimd.core.canonical import STAGES
from scrapy_aimd.dupefilter import (
    DUPLICATE_KINDS,
    TOP_HOSTS,
    AimdDupeFilter,
    TopCounts,
    kind_stat,
)
from scrapy_aimd.events import DuplicateHosts
from scrapy_aimd.report.html import DUPLICATE_HOSTS_SHOWN, _duplicates
from scrapy_aimd.reporter import duplicates_line

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

SETTINGS = {
    "DUPEFILTER_CLASS": "scrapy_aimd.dupefilter.AimdDupeFilter",
    "REQUEST_FINGERPRINTER_CLASS": "scrapy_aimd.fingerprint.AimdRequestFingerprinter",
}


def filtering(
    first: str, duplicates: list[str], crawler: Crawler | None = None, **meta: object
) -> tuple[AimdDupeFilter, dict[str, int]]:
    """A dupefilter that saw ``first``, then each of ``duplicates`` (each must be
    one) as the scheduler does: request_seen, then log. Its stats about them."""
    crawler = crawler or get_crawler(settings_dict=SETTINGS)
    spider = Spider.from_crawler(crawler, name="s")
    dupefilter = build_from_crawler(AimdDupeFilter, crawler)
    assert not dupefilter.request_seen(Request(first, meta=dict(meta)))
    for url in duplicates:
        request = Request(url, meta=dict(meta))
        assert dupefilter.request_seen(request), url
        dupefilter.log(request, spider)
    assert crawler.stats is not None
    stats = {
        key: value
        for key, value in crawler.stats.get_stats().items()
        if key.startswith(("dupefilter/", "aimd/dupefilter/"))
    }
    return dupefilter, stats


def test_the_kinds_are_exact_then_the_stages() -> None:
    assert DUPLICATE_KINDS[0] == "exact"
    assert DUPLICATE_KINDS[1:] == STAGES
    assert kind_stat("query_filter") == "aimd/dupefilter/filtered/query_filter"


def test_every_kinds_stat_is_documented() -> None:
    stats_page = Path(__file__).resolve().parent.parent / "docs" / "signals.rst"
    documented = stats_page.read_text(encoding="utf-8")
    assert [k for k in DUPLICATE_KINDS if f"``{kind_stat(k)}``" not in documented] == []


def test_duplicates_are_counted_by_what_the_canonicalizer_changed() -> None:
    _, stats = filtering(
        "http://example.com/a",
        [
            "http://example.com/a",
            "http://example.com/a",
            "http://example.com/a?utm_source=x",
            "http://example.com/a#top",
            "http://example.com/a?utm_source=x#top",
            "HTTP://example.com:80/a/",  # Request itself lowercases the scheme
        ],
    )
    assert stats == {
        "dupefilter/filtered": 6,
        "aimd/dupefilter/filtered/exact": 2,
        "aimd/dupefilter/filtered/query_filter": 2,
        "aimd/dupefilter/filtered/fragment": 2,
        "aimd/dupefilter/filtered/port": 1,
        "aimd/dupefilter/filtered/path": 1,
    }


def test_the_first_spelling_seen_does_not_decide_the_kind() -> None:
    """Only 64-bit keys are kept: the kind is what this URL needed."""
    _, stats = filtering("http://example.com/a?utm_source=x", ["http://example.com/a"])
    assert stats["aimd/dupefilter/filtered/exact"] == 1
    assert "aimd/dupefilter/filtered/query_filter" not in stats


def test_a_verbatim_url_is_an_exact_duplicate() -> None:
    _, stats = filtering("http://example.com/a#x", ["http://example.com/a#x"], verbatim_url=True)
    assert stats == {"dupefilter/filtered": 1, "aimd/dupefilter/filtered/exact": 1}


def test_the_crawls_canonicalization_settings_decide_the_kind() -> None:
    crawler = get_crawler(
        settings_dict={**SETTINGS, "AIMD_STRIP_PARAMS": ["ref"], "AIMD_CANONICAL_FRAGMENTS": "keep"}
    )
    _, stats = filtering("http://example.com/a#x", ["http://example.com/a?ref=1#x"], crawler)
    assert stats == {"dupefilter/filtered": 1, "aimd/dupefilter/filtered/query_filter": 1}


def test_with_another_fingerprinter_only_the_total_is_known() -> None:
    _, stats = filtering("http://example.com/a", ["http://example.com/a#f"], get_crawler())
    assert stats == {"dupefilter/filtered": 1}


def test_the_hosts_with_the_most_duplicates() -> None:
    crawler = get_crawler(settings_dict=SETTINGS)
    dupefilter, _ = filtering(
        "http://a.test/p",
        ["http://a.test/p"] * 3 + ["http://A.test:80/p?utm_source=1"],
        crawler,
    )
    spider = Spider.from_crawler(crawler, name="s")
    for url, meta in (
        ("http://b.test:8080/q", {}),
        ("http://c.test/r", {"download_slot": "slot-c"}),
    ):
        for seen in (False, True):
            request = Request(url, meta=meta)
            assert dupefilter.request_seen(request) is seen
        dupefilter.log(request, spider)
    # host keys as the controllers (the summary, the events) have them
    assert dupefilter.hosts.top(10) == [("a.test", 4), ("b.test:8080", 1), ("slot-c", 1)]
    assert dupefilter.hosts.top(1) == [("a.test", 4)]


# --- TopCounts: the hosts' counts in bounded memory ----------------------------


def test_top_counts_are_exact_while_few_keys_are_counted() -> None:
    counts = TopCounts(keep=3)
    for key in "abacabadaeaf":  # 6 keys: within 2 x keep
        counts.add(key)
    assert counts.top(3) == [("a", 6), ("b", 2), ("c", 1)]
    assert counts.error == 0


def test_top_counts_stay_bounded_and_keep_the_heavy_keys() -> None:
    counts = TopCounts(keep=100)
    for i in range(100_000):
        counts.add(f"host{i}")  # a million-host crawl's long tail
        if i % 10 == 0:
            counts.add("heavy")
        if i % 50 == 0:
            counts.add("second")
        assert len(counts) <= 200
    (heavy, n1), (second, n2) = counts.top(2)
    assert (heavy, second) == ("heavy", "second")
    assert 10_000 <= n1 <= 10_000 + counts.error
    assert 2_000 <= n2 <= 2_000 + counts.error


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=40), max_size=400), st.integers(1, 8))
def test_top_counts_are_never_too_low_and_at_most_error_too_high(
    stream: list[int], keep: int
) -> None:
    counts = TopCounts(keep=keep)
    truth: Counter[int] = Counter()
    for key in stream:
        counts.add(str(key))
        truth[key] += 1
    assert len(counts) <= 2 * keep
    held = dict(counts.top(2 * keep))
    for key, n in truth.items():
        if str(key) in held:
            assert n <= held[str(key)] <= n + counts.error
        else:
            assert n <= counts.error
    if len(truth) <= 2 * keep:
        assert held == {str(k): n for k, n in truth.items()}


# --- what is said of the hosts: never exact when it is not --------------------


def _truly_in_top(truth: Counter[str], host: str, n: int) -> bool:
    """``host`` is one of the ``n`` with the most (ties with the n-th included)."""
    ranked = sorted(truth.values(), reverse=True)
    return truth[host] >= ranked[min(n, len(ranked)) - 1]


def _check_bounds(truth: Counter[str], tops: DuplicateHosts, n: int) -> None:
    """Every figure ``tops`` gives is a true bound, and what it ranks is true."""
    for host, count in tops.counts.items():
        assert tops.least(host) <= truth[host] <= count, host
    for host, count in truth.items():
        if host not in tops.counts:
            assert count <= tops.others, host
    for host in tops.certain(n):
        assert _truly_in_top(truth, host, n), host
    assert tops.count == len(truth)


def test_past_the_bound_the_hosts_are_not_ranked_on_guesses() -> None:
    """100,000 hosts of 3 duplicates and 5 of 100, shuffled: past 2,000 hosts
    the counts are bounds, and no light host is shown as a heavy one."""
    truth: Counter[str] = Counter()
    stream = [f"h{i}.test" for i in range(100_000) for _ in range(3)]
    stream += [f"heavy{i}.test" for i in range(5) for _ in range(100)]
    random.Random(7).shuffle(stream)
    counts = TopCounts()
    for host in stream:
        counts.add(host)
        truth[host] += 1
    assert len(counts) <= 2 * TOP_HOSTS
    tops = counts.tops(20)
    _check_bounds(truth, tops, 20)
    assert tops.count == 100_005
    for host in tops.counts:
        if truth[host] == 3:
            assert tops.errors.get(host, 0) > 0, host  # never shown as exact
    for host in tops.certain(10):
        assert host.startswith("heavy"), host
    line = duplicates_line({"total": len(stream) - 100_005}, tops)
    for host in re.findall(r"([\w.]+) \((?:at most )?\d+", line):
        assert host.startswith("heavy"), line  # a light host is never named among the most
    assert "100,005 hosts had duplicates" in line


def test_five_thousand_light_hosts_say_how_many_they_are() -> None:
    rng = random.Random(3)
    truth = Counter({f"h{i}.test": rng.randint(1, 7) for i in range(5000)})
    stream = [host for host, n in truth.items() for _ in range(n)]
    rng.shuffle(stream)
    counts = TopCounts()
    for host in stream:
        counts.add(host)
    tops = counts.tops(20)
    _check_bounds(truth, tops, 20)
    line = duplicates_line({"total": len(stream), "exact": len(stream)}, tops)
    for host, n in re.findall(r"([\w.]+) \((\d+)\)", line):
        assert truth[host] == int(n), line  # a count shown bare is exact
    for host, most, least in re.findall(r"([\w.]+) \(at most (\d+), at least (\d+)\)", line):
        assert int(least) <= truth[host] <= int(most), line
    assert "5,000 hosts" in line
    page = _duplicates({"total": len(stream), "exact": len(stream)}, tops)
    listed = re.findall(r'<tr><th scope="row">(h\d+\.test)</th>', page)
    more = re.search(r"and ([\d,]+) more hosts|([\d,]+) hosts had duplicates", page)
    assert more is not None, page
    assert int((more.group(1) or more.group(2)).replace(",", "")) == 5000 - len(listed)
    for host in listed:
        assert _truly_in_top(truth, host, DUPLICATE_HOSTS_SHOWN), host


def test_a_host_counted_before_the_first_prune_stays_exact() -> None:
    counts = TopCounts(keep=10)
    for _ in range(500):
        counts.add("heavy")
    for i in range(2_000):
        counts.add(f"light{i}")
    tops = counts.tops(3)
    assert counts.error > 0
    assert tops.counts["heavy"] == 500
    assert "heavy" not in tops.errors
    assert tops.certain(3) == ["heavy"]
    assert tops.count == 2_001
    assert duplicates_line({"total": 2_500}, tops).startswith(
        "Filtered 2500 duplicate requests; the most on heavy (500); "
        "2,001 hosts had duplicates, no other more than "
    )


def test_few_hosts_are_counted_and_ranked_exactly() -> None:
    counts = TopCounts(keep=3)
    for key in "abacabadaeaf":
        counts.add(key)
    tops = counts.tops(2)
    assert tops.counts == {"a": 6, "b": 2}
    assert tops.errors == {}
    assert (tops.others, tops.count) == (1, 6)
    assert tops.certain(2) == ["a", "b"]
    assert duplicates_line({"total": 12}, tops) == (
        "Filtered 12 duplicate requests; the most on a (6), b (2)"
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=40), max_size=400),
    st.integers(1, 8),
    st.integers(1, 12),
)
def test_what_is_said_of_the_hosts_holds_for_any_stream(
    stream: list[int], keep: int, n: int
) -> None:
    counts = TopCounts(keep=keep)
    truth: Counter[str] = Counter()
    for key in stream:
        counts.add(str(key))
        truth[str(key)] += 1
    tops = counts.tops(n)
    assert len(tops.counts) <= n
    _check_bounds(truth, tops, n)
    fields = tops.close_fields()
    assert DuplicateHosts.from_close(fields) == tops
