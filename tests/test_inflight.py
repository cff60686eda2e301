"""The in-flight registry: one entry per request, gone when no part holds it."""

from __future__ import annotations

from typing import Any

from scrapy.utils.test import get_crawler

from scrapy_aimd.core.controller import Ticket
from scrapy_aimd.crawl import crawl_parts
from scrapy_aimd.feedback_middleware import AimdDownloaderMiddleware
from scrapy_aimd.inflight import InFlight
from scrapy_aimd.scheduler import AimdScheduler

TICKET = Ticket(serial=1, started=0.0, round=0)


class FakeRequest:
    """Hashable by identity, with a meta, as a Request is."""

    def __init__(self, **meta: Any) -> None:
        self.meta = meta


def test_an_entry_lives_while_some_part_holds_it() -> None:
    flights: InFlight[str] = InFlight()
    flights.handed_out("r", "a.test", TICKET, 1.0)
    flights.open("r").sent_at = 1.1
    flights.store("r")
    assert flights.take_ticket("r") == ("a.test", TICKET)
    assert flights.take_ticket("r") is None  # a ticket is given back once
    flight = flights.get("r")
    assert flight is not None
    flight.sent_at = None
    flights.settle("r")
    assert flights.get("r") is not None and flights.stored == 1  # the JOBDIR row waits
    flights.unstore("r")
    assert flights.get("r") is None and len(flights) == 0 and flights.stored == 0


def test_a_cancelled_download_is_never_forgotten() -> None:
    flights: InFlight[str] = InFlight()
    flights.open("r").cancelled = True
    flights.settle("r")
    assert flights.cancelled("r")


def test_stale_tickets_are_those_long_past_their_own_timeout() -> None:
    flights: InFlight[FakeRequest] = InFlight()
    quick = FakeRequest(download_timeout=5)
    slow = FakeRequest()
    flights.handed_out(quick, "a.test", TICKET, 0.0)
    flights.handed_out(slow, "b.test", TICKET._replace(serial=2), 0.0)
    assert flights.stale(70.0, 180.0) == []
    assert flights.stale(70.1, 180.0) == [quick]  # 2 x 5 s + 60 s
    assert flights.stale(420.1, 180.0) == [quick, slow]


def test_the_scheduler_and_the_middleware_share_the_crawls_parts() -> None:
    crawler = get_crawler(settings_dict={"AIMD_HOSTS": {"a.test": {"max_concurrency": 2}}})
    scheduler = AimdScheduler.from_crawler(crawler)
    middleware = AimdDownloaderMiddleware.from_crawler(crawler)
    parts = crawl_parts(crawler)
    assert scheduler.configs is middleware.configs is parts.configs
    assert scheduler.flights is middleware.flights is parts.flights
    assert crawl_parts(get_crawler()) is not parts


def test_places_the_engine_is_done_with_are_found_only_then() -> None:
    flights: InFlight[str] = InFlight()
    flights.handed_out("a", "a.test", TICKET, 1.0)
    flights.handed_out("b", "a.test", TICKET, 1.0)
    flights.handed_out("c", "a.test", None, 1.0)  # handed out without a place
    assert flights.tickets == 2
    assert flights.done_without_feedback({"a", "b"}) == []
    assert flights.done_without_feedback({"b"}) == ["a"]
    flights.take_ticket("a")
    assert flights.tickets == 1
    assert flights.done_without_feedback(set()) == ["b"]
