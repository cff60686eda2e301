"""Which sends may go on a new connection (scrapy_aimd.core.connections), on a fake clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scrapy_aimd.core.connections import KEEP_ALIVE_TRUST, OpenConnections

A, B = "http://a.example", "https://b.example"


def test_an_origins_first_send_needs_a_connection_and_the_next_reuses_it() -> None:
    conns = OpenConnections()
    assert conns.sent(A, 0.0) is True
    conns.answered(A, 0.1, kept=True)
    assert conns.sent(A, 0.3) is False
    assert conns.sent(B, 0.3) is True  # another origin, its own connections


def test_more_requests_in_flight_than_ever_before_need_another_connection() -> None:
    conns = OpenConnections()
    assert [conns.sent(A, 0.0), conns.sent(A, 0.0)] == [True, True]
    conns.answered(A, 0.1, kept=True)
    assert conns.sent(A, 0.2) is False  # the one freed
    assert conns.sent(A, 0.2) is True  # a third at once: none free
    for _ in range(3):
        conns.answered(A, 0.3, kept=True)
    assert [conns.sent(A, 0.4) for _ in range(3)] == [False, False, False]


def test_a_connection_closed_by_its_answer_is_not_reused() -> None:
    conns = OpenConnections()
    conns.sent(A, 0.0)
    conns.answered(A, 0.1, kept=False)  # an error, or Connection: close
    assert conns.sent(A, 0.2) is True
    conns.sent(A, 0.2)
    conns.answered(A, 0.3, kept=False)
    conns.answered(A, 0.3, kept=True)
    assert [conns.sent(A, 0.4), conns.sent(A, 0.4)] == [False, True]


def test_an_origin_idle_past_the_keep_alive_trust_needs_a_new_connection() -> None:
    conns = OpenConnections()
    conns.sent(A, 0.0)
    conns.answered(A, 1.0, kept=True)
    assert conns.sent(A, 1.0 + KEEP_ALIVE_TRUST) is False
    conns.answered(A, 2.0 + KEEP_ALIVE_TRUST, kept=True)
    assert conns.sent(A, 2.0 + 2 * KEEP_ALIVE_TRUST + 0.01) is True


def test_a_busy_origin_is_never_taken_for_idle() -> None:
    conns = OpenConnections()
    conns.sent(A, 0.0)
    conns.sent(A, 0.0)
    conns.answered(A, 0.1, kept=True)  # one still in flight: its connection is open
    assert conns.sent(A, 100.0) is False


def test_idle_origins_are_forgotten_and_answers_without_a_send_ignored() -> None:
    conns = OpenConnections()
    for n in range(100):
        conns.sent(f"http://h{n}.example", 0.0)
        conns.answered(f"http://h{n}.example", 0.1, kept=True)
    assert len(conns) == 100
    conns.sent(A, 0.2 + KEEP_ALIVE_TRUST)
    assert len(conns) == 1  # only the origin in use
    conns.answered(B, 5.0, kept=True)  # never sent: nothing to do
    conns.answered(A, 5.0, kept=False)
    assert len(conns) == 0


events = st.lists(
    st.tuples(st.sampled_from(["send", "kept", "closed"]), st.sampled_from([A, B]),
              st.floats(min_value=0, max_value=2 * KEEP_ALIVE_TRUST)),
    max_size=60,
)  # fmt: skip


@given(events)
def test_a_send_is_never_called_reused_unless_a_connection_was_free(
    script: list[tuple[str, str, float]],
) -> None:
    """Against a model pool: a send that the guess calls reused always finds a
    connection free in a pool that keeps every connection until an error, a
    close, or an idle spell past the trust."""
    conns = OpenConnections()
    free: dict[str, int] = {}
    busy: dict[str, int] = {}
    idle_since: dict[str, float] = {}
    now = 0.0
    for what, origin, step in script:
        now += step
        if what == "send":
            if busy.get(origin, 0) == 0 and now - idle_since.get(origin, now) > KEEP_ALIVE_TRUST:
                free[origin] = 0  # the server closed them
            new = conns.sent(origin, now)
            if not new:
                assert free.get(origin, 0) > 0, "called reused with no connection free"
                free[origin] -= 1
            busy[origin] = busy.get(origin, 0) + 1
        elif busy.get(origin, 0):
            conns.answered(origin, now, kept=what == "kept")
            busy[origin] -= 1
            free[origin] = free.get(origin, 0) + (what == "kept")
            if busy[origin] == 0:
                idle_since[origin] = now
