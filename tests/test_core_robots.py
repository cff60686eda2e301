"""RFC 9309 outcomes, per origin, with a fake clock."""

from __future__ import annotations

import gzip
import math
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_aimd.core.robots import (
    MAX_BYTES,
    ORIGIN_BYTES,
    PARSED_SHARE,
    RobotsBook,
    RobotsConfig,
    RobotsOutcome,
    Verdict,
    classify,
    decoded_prefix,
    parse_rules,
    usable_crawl_delay,
)

ORIGIN = "http://a.test"
UA = "aimdbot"
RULES = b"User-agent: *\nDisallow: /private\nCrawl-delay: 2.5\nSitemap: http://a.test/s.xml\n"


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, RobotsOutcome.RULES),
        (204, RobotsOutcome.RULES),
        (301, RobotsOutcome.ALLOW_ALL),  # redirects not followed to the end
        (401, RobotsOutcome.ALLOW_ALL),
        (403, RobotsOutcome.ALLOW_ALL),
        (404, RobotsOutcome.ALLOW_ALL),
        (410, RobotsOutcome.ALLOW_ALL),
        (429, RobotsOutcome.UNREACHABLE),
        (500, RobotsOutcome.UNREACHABLE),
        (503, RobotsOutcome.UNREACHABLE),
        (None, RobotsOutcome.UNREACHABLE),
    ],
)
def test_status_outcomes(status: int | None, outcome: RobotsOutcome) -> None:
    assert classify(status) is outcome


def test_unknown_origin_waits_and_needs_a_fetch() -> None:
    book = RobotsBook()
    assert book.verdict(ORIGIN, f"{ORIGIN}/", UA) is Verdict.WAIT
    assert book.needs_fetch(ORIGIN, 0.0)
    book.started(ORIGIN)
    assert not book.needs_fetch(ORIGIN, 0.0)  # one fetch at a time


def test_rules_allow_deny_and_crawl_delay() -> None:
    book = RobotsBook()
    book.started(ORIGIN)
    result = book.fetched(ORIGIN, 0.0, 200, RULES, UA)
    assert result.settled and result.crawl_delay == 2.5 and not result.crawl_delay_capped
    assert book.verdict(ORIGIN, f"{ORIGIN}/public", UA) is Verdict.ALLOW
    assert book.verdict(ORIGIN, f"{ORIGIN}/private/x", UA) is Verdict.DENY
    assert book.sitemaps(ORIGIN) == ["http://a.test/s.xml"]


def test_404_allows_everything() -> None:
    book = RobotsBook()
    book.started(ORIGIN)
    result = book.fetched(ORIGIN, 0.0, 404, b"User-agent: *\nDisallow: /\n", UA)
    assert result.settled and result.crawl_delay is None
    assert book.verdict(ORIGIN, f"{ORIGIN}/anything", UA) is Verdict.ALLOW


def test_503_waits_with_backoff_then_rules() -> None:
    book = RobotsBook(RobotsConfig(retries=3, backoff=2.0))
    book.started(ORIGIN)
    first = book.fetched(ORIGIN, 10.0, 503, b"Disallow: /", UA)
    assert not first.settled and first.retry_at == 12.0
    assert book.verdict(ORIGIN, f"{ORIGIN}/", UA) is Verdict.WAIT  # an error page is not rules
    assert not book.needs_fetch(ORIGIN, 11.9)
    assert book.needs_fetch(ORIGIN, 12.0)
    book.started(ORIGIN)
    second = book.fetched(ORIGIN, 12.0, 503, b"", UA)
    assert second.retry_at == 16.0  # doubled
    book.started(ORIGIN)
    third = book.fetched(ORIGIN, 16.0, 200, RULES, UA)
    assert third.settled
    assert book.verdict(ORIGIN, f"{ORIGIN}/private", UA) is Verdict.DENY


def test_unreachable_after_retries_denies_the_origin() -> None:
    book = RobotsBook(RobotsConfig(retries=2, backoff=1.0))
    now = 0.0
    results = []
    for _ in range(3):
        assert book.needs_fetch(ORIGIN, now)
        book.started(ORIGIN)
        results.append(book.fetched(ORIGIN, now, None, b"", UA))
        now += 10
    assert [r.settled for r in results] == [False, False, True]
    assert book.verdict(ORIGIN, f"{ORIGIN}/", UA) is Verdict.DENY
    assert not book.needs_fetch(ORIGIN, now)
    assert book.needs_fetch(ORIGIN, now + 24 * 3600)  # tried again once the cache expires


def test_retries_spent_elsewhere_end_as_the_last_retry_here() -> None:
    book = RobotsBook(RobotsConfig(retries=2, backoff=1.0))
    book.started(ORIGIN)
    result = book.retries_spent(ORIGIN, 5.0, None, UA)
    assert result.settled and result.outcome is RobotsOutcome.UNREACHABLE
    assert book.verdict(ORIGIN, f"{ORIGIN}/", UA) is Verdict.DENY  # no rules: skipped
    assert not book.needs_fetch(ORIGIN, 6.0)
    known = RobotsBook(RobotsConfig(retries=2, backoff=1.0))
    known.started(ORIGIN)
    known.fetched(ORIGIN, 0.0, 200, RULES, UA)
    known.started(ORIGIN)
    assert known.retries_spent(ORIGIN, 5.0, 503, UA).settled
    assert known.verdict(ORIGIN, f"{ORIGIN}/ok", UA) is Verdict.ALLOW  # old rules in force
    assert known.verdict(ORIGIN, f"{ORIGIN}/private", UA) is Verdict.DENY


def test_stale_rules_are_refetched_and_kept_while_the_refetch_fails() -> None:
    book = RobotsBook(RobotsConfig(max_age=100.0, retries=1))
    book.started(ORIGIN)
    book.fetched(ORIGIN, 0.0, 200, RULES, UA)
    assert not book.needs_fetch(ORIGIN, 99.0)
    assert book.needs_fetch(ORIGIN, 100.0)
    book.started(ORIGIN)
    book.fetched(ORIGIN, 100.0, 500, b"", UA)
    assert book.verdict(ORIGIN, f"{ORIGIN}/private", UA) is Verdict.DENY  # old rules in force
    assert book.verdict(ORIGIN, f"{ORIGIN}/ok", UA) is Verdict.ALLOW
    book.started(ORIGIN)
    book.fetched(ORIGIN, 110.0, 500, b"", UA)  # retries spent: still the old rules
    assert book.verdict(ORIGIN, f"{ORIGIN}/ok", UA) is Verdict.ALLOW


def test_crawl_delay_is_capped() -> None:
    book = RobotsBook(RobotsConfig(max_crawl_delay=60.0))
    book.started(ORIGIN)
    result = book.fetched(ORIGIN, 0.0, 200, b"User-agent: *\nCrawl-delay: 3600\n", UA)
    assert result.crawl_delay == 60.0 and result.crawl_delay_capped


def test_non_numeric_crawl_delay_is_ignored() -> None:
    book = RobotsBook()
    book.started(ORIGIN)
    result = book.fetched(ORIGIN, 0.0, 200, b"User-agent: *\nCrawl-delay: soon\n", UA)
    assert result.crawl_delay is None


def test_only_the_first_500_kib_count() -> None:
    body = b"User-agent: *\nDisallow: /a\n" + b"#" * MAX_BYTES + b"\nDisallow: /b\n"
    rules = parse_rules(body)
    assert not rules.can_fetch("http://x/a", UA)
    assert rules.can_fetch("http://x/b", UA)
    book = RobotsBook()
    book.started(ORIGIN)
    assert book.fetched(ORIGIN, 0.0, 200, body, UA).truncated


def test_garbage_is_ignored_line_by_line() -> None:
    body = bytes(range(256)) * 40 + b"\nUser-agent: *\nDisallow: /x\n\xff\xfe\x00junk: :\n"
    rules = parse_rules(body)
    assert not rules.can_fetch("http://x/x", UA)
    assert rules.can_fetch("http://x/y", UA)


def test_a_snapshot_restores_the_rules_and_their_age_on_another_clock() -> None:
    book = RobotsBook(RobotsConfig(persist=True, max_age=100.0))
    book.fetched(ORIGIN, 10.0, 200, RULES, UA)
    data = book.snapshot(ORIGIN)
    assert data is not None
    assert data["fetched_at"] == 10.0
    # A later run's clock starts elsewhere: the caller moves fetched_at onto it.
    later = RobotsBook(RobotsConfig(max_age=100.0))
    assert later.restore(ORIGIN, {**data, "fetched_at": 1000.0 - 30.0}, 1000.0)
    assert later.verdict(ORIGIN, f"{ORIGIN}/private/x", UA) is Verdict.DENY
    assert later.verdict(ORIGIN, f"{ORIGIN}/public", UA) is Verdict.ALLOW
    assert later.sitemaps(ORIGIN) == ["http://a.test/s.xml"]
    assert not later.needs_fetch(ORIGIN, 1000.0 + 69.0)
    assert later.needs_fetch(ORIGIN, 1000.0 + 70.0)
    # Known here already, or unusable data: nothing changes.
    assert not later.restore(ORIGIN, data, 1000.0)
    assert not RobotsBook().restore(ORIGIN, {"fetched_at": "soon"}, 0.0)


def test_a_snapshot_from_the_future_counts_as_fetched_now() -> None:
    book = RobotsBook(RobotsConfig(max_age=100.0))
    assert book.restore(ORIGIN, {"known": True, "fetched_at": 5000.0}, 10.0)
    assert book.state(ORIGIN).fetched_at == 10.0


def test_rules_are_snapshotted_only_when_their_text_is_kept() -> None:
    book = RobotsBook()
    assert book.snapshot(ORIGIN) is None  # nothing known
    book.fetched(ORIGIN, 0.0, 200, RULES, UA)
    assert book.snapshot(ORIGIN) is None  # fetched again on resume
    book.fetched("http://b.test", 0.0, 404, b"", UA)
    assert book.snapshot("http://b.test") == {"known": True, "denied": False, "fetched_at": 0.0}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, "2", True, None])
def test_a_crawl_delay_that_is_no_delay_is_ignored(value: object) -> None:
    # Protego before 0.7 returns nan for "Crawl-delay: nan".
    assert usable_crawl_delay(value) is None


def test_usable_crawl_delays_are_seconds() -> None:
    assert usable_crawl_delay(0) == 0.0
    assert usable_crawl_delay(2.5) == 2.5


def test_an_answer_that_could_not_be_handled_still_settles_the_origin() -> None:
    book = RobotsBook()
    book.started(ORIGIN)
    book.settle_anyway(ORIGIN, 1.0)
    assert book.verdict(ORIGIN, "http://a.test/private", UA) is Verdict.ALLOW
    assert not book.needs_fetch(ORIGIN, 2.0)
    other = "http://b.test"
    book.fetched(other, 0.0, 200, RULES, UA)
    book.settle_anyway(other, 1.0)  # the rules already taken stay
    assert book.verdict(other, "http://b.test/private", UA) is Verdict.DENY


def test_a_compressed_body_is_inflated_to_just_past_the_limit() -> None:
    body = RULES + b"#" * (4 * MAX_BYTES)
    for encoding, packed in (
        ("gzip", gzip.compress(body)),
        ("deflate", zlib.compress(body)),
        ("deflate", zlib.compress(body, wbits=-zlib.MAX_WBITS)),
    ):
        prefix = decoded_prefix(packed, encoding)
        assert prefix is not None and len(prefix) == MAX_BYTES + 1
        assert prefix.startswith(RULES)
    assert decoded_prefix(gzip.compress(RULES), "GZIP") == RULES
    assert decoded_prefix(b"not gzip", "gzip") is None
    assert decoded_prefix(RULES, "br") is None


# -- the memory budget ----------------------------------------------------------

SMALL_RULES = b"User-agent: *\nDisallow: /private\n"


def cost_of_origins(count: int) -> int:
    """A budget whose share for the origins holds ``count`` of SMALL_RULES."""
    one = ORIGIN_BYTES + len(zlib.compress(SMALL_RULES, 6))
    return math.ceil(count * one / (1 - PARSED_SHARE)) + 1


def test_rules_are_kept_compressed_and_parsed_again_when_needed() -> None:
    # Room for every origin, but for the parsed rules of one only.
    book = RobotsBook(RobotsConfig(memory=cost_of_origins(3)))
    for name in "abc":
        book.fetched(f"http://{name}.test", 0.0, 200, SMALL_RULES, UA)
    assert book.evicted == 0 and book.memory_stats()["parsed"] == 1
    assert book.verdict("http://a.test", "http://a.test/private/x", UA) is Verdict.DENY
    assert book.verdict("http://a.test", "http://a.test/public", UA) is Verdict.ALLOW
    assert book.parsed_again == 1  # a.test's rules parsed again once, then kept parsed
    assert book.verdict("http://b.test", "http://b.test/private", UA) is Verdict.DENY
    assert book.parsed_again == 2
    assert book.sitemaps("http://c.test") == []


def test_past_the_budget_the_origins_asked_about_least_recently_are_forgotten() -> None:
    book = RobotsBook(RobotsConfig(memory=cost_of_origins(3)))
    book.fetched("http://a.test", 0.0, 200, SMALL_RULES, UA)
    book.fetched("http://b.test", 1.0, 200, SMALL_RULES, UA)
    book.fetched("http://c.test", 2.0, 404, b"", UA)
    # a.test asked about since: b.test is now the least recently asked.
    assert book.verdict("http://a.test", "http://a.test/private", UA) is Verdict.DENY
    book.fetched("http://d.test", 3.0, 200, SMALL_RULES, UA)
    assert book.evicted == 1
    assert "http://b.test" not in book.origins
    assert book.verdict("http://c.test", "http://c.test/private", UA) is Verdict.ALLOW
    for kept in ("http://a.test", "http://d.test"):
        assert book.verdict(kept, f"{kept}/private", UA) is Verdict.DENY
    # Asked about again, b.test waits for its robots.txt, fetched again (and an
    # origin made room for it: c.test, now the least recently asked).
    assert book.needs_fetch("http://b.test", 3.0)
    assert book.verdict("http://b.test", "http://b.test/private", UA) is Verdict.WAIT
    assert book.evicted == 2 and "http://c.test" not in book.origins


def test_an_origin_being_fetched_is_not_forgotten() -> None:
    book = RobotsBook(RobotsConfig(memory=cost_of_origins(1)))
    book.fetched("http://a.test", 0.0, 200, SMALL_RULES, UA)
    book.started("http://a.test")  # its refetch is under way
    book.fetched("http://b.test", 1.0, 200, SMALL_RULES, UA)
    assert "http://a.test" in book.origins
    assert book.state("http://a.test").fetching


def test_a_budget_of_0_keeps_everything_parsed() -> None:
    book = RobotsBook(RobotsConfig(memory=0))
    for index in range(200):
        book.fetched(f"http://o{index}.test", 0.0, 200, SMALL_RULES, UA)
    assert book.evicted == 0 and book.memory_stats()["parsed"] == 200


@pytest.mark.parametrize("memory", [-1, 1.5, True, "1"])
def test_a_budget_must_be_a_whole_number_of_bytes(memory: object) -> None:
    with pytest.raises(ValueError, match="memory"):
        RobotsConfig(memory=memory)  # type: ignore[arg-type]


def test_a_snapshot_still_holds_the_rules_text() -> None:
    book = RobotsBook(RobotsConfig(persist=True, memory=cost_of_origins(3)))
    book.fetched(ORIGIN, 0.0, 200, RULES, UA)
    book.fetched("http://b.test", 0.0, 404, b"", UA)  # a.test's parsed rules let go of
    data = book.snapshot(ORIGIN)
    assert data is not None and data["rules"] == RULES.decode()


ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["fetch-rules", "fetch-404", "fetch-503", "start", "ask"]),
        st.integers(0, 7),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ACTIONS, st.integers(1, 6))
def test_a_bounded_book_never_answers_otherwise_than_an_unbounded_one(
    actions: list[tuple[str, int]], room: int
) -> None:
    """Within any budget, a verdict is the unbounded book's, or WAIT for an origin
    forgotten (whose robots.txt is then fetched again); the accounts add up."""
    bounded = RobotsBook(RobotsConfig(memory=cost_of_origins(room)))
    unbounded = RobotsBook(RobotsConfig(memory=0))
    for now, (action, index) in enumerate(actions):
        origin = f"http://o{index}.test"
        url = f"{origin}/private" if now % 2 else f"{origin}/public"
        for book in (bounded, unbounded):
            if action == "start":
                book.started(origin)
            elif action != "ask":
                status = {"fetch-rules": 200, "fetch-404": 404, "fetch-503": 503}[action]
                book.fetched(origin, float(now), status, SMALL_RULES, UA)
        expected = unbounded.verdict(origin, url, UA)
        forgotten = origin not in bounded.origins or not bounded.state(origin).known
        got = bounded.verdict(origin, url, UA)
        assert got is expected or (got is Verdict.WAIT and forgotten), (action, origin)
        stats = bounded.memory_stats()
        packed = sum(len(s.packed or b"") for s in bounded.origins.values())
        assert stats["kept_bytes"] == ORIGIN_BYTES * len(bounded.origins) + packed
        unsettled = sum(not s.settled for s in bounded.origins.values())
        assert stats["kept_bytes"] <= bounded.config.memory * (1 - PARSED_SHARE) or (
            len(bounded.origins) <= unsettled + 1
        )
