"""Which sends may go on a new connection (scrapy_aimd.core.connections), on a fake clock."""

from __future__ import annotations

import copy

from hypothesis import example, given
from hypothesis import strategies as st

from scrapy_aimd.core.connections import KEEP_ALIVE_TRUST, OpenConnections

A, B = "http://a.example", "https://b.example"


def test_an_origins_first_send_opens_a_connection_and_the_next_reuses_it() -> None:
    conns = OpenConnections()
    assert conns.opens_connection(A, 0.0) is True
    conns.answered(A, 0.1, kept=True)
    assert conns.opens_connection(A, 0.3) is False
    assert conns.opens_connection(B, 0.3) is True  # another origin, its own connections


def test_more_requests_in_flight_than_connections_free_open_more() -> None:
    conns = OpenConnections()
    assert [conns.opens_connection(A, 0.0), conns.opens_connection(A, 0.0)] == [True, True]
    conns.answered(A, 0.1, kept=True)
    assert conns.opens_connection(A, 0.2) is False  # the one freed
    assert conns.opens_connection(A, 0.2) is True  # none free: the other is busy
    for _ in range(3):
        conns.answered(A, 0.3, kept=True)
    assert [conns.opens_connection(A, 0.4) for _ in range(4)] == [False, False, False, True]


def test_a_connection_closed_by_its_answer_is_not_reused() -> None:
    conns = OpenConnections()
    conns.opens_connection(A, 0.0)
    conns.answered(A, 0.1, kept=False)  # an error, Connection: close, a body to the close
    assert conns.opens_connection(A, 0.2) is True
    conns.opens_connection(A, 0.2)
    conns.answered(A, 0.3, kept=False)
    conns.answered(A, 0.3, kept=True)
    assert [conns.opens_connection(A, 0.4), conns.opens_connection(A, 0.4)] == [False, True]


def test_a_connection_idle_past_the_keep_alive_trust_is_not_reused() -> None:
    conns = OpenConnections()
    conns.opens_connection(A, 0.0)
    conns.answered(A, 1.0, kept=True)
    assert conns.opens_connection(A, 1.0 + KEEP_ALIVE_TRUST) is False
    conns.answered(A, 2.0 + KEEP_ALIVE_TRUST, kept=True)
    assert conns.opens_connection(A, 2.0 + 2 * KEEP_ALIVE_TRUST + 0.01) is True


def test_each_idle_connection_expires_on_its_own_while_another_is_busy() -> None:
    """A server closes each idle connection after its timeout, whatever the
    others do: a long download elsewhere keeps none of them open."""
    conns = OpenConnections()
    conns.opens_connection(A, 0.0)
    conns.opens_connection(A, 0.0)
    conns.answered(A, 0.1, kept=True)  # one free; the other still downloading
    assert conns.opens_connection(A, 30.0) is True
    conns.answered(A, 30.5, kept=True)  # the long one, kept
    conns.answered(A, 31.0, kept=True)
    assert [conns.opens_connection(A, 31.0), conns.opens_connection(A, 31.0)] == [False, False]


def test_of_two_free_connections_the_one_idle_past_the_trust_is_not_counted() -> None:
    conns = OpenConnections()
    conns.opens_connection(A, 0.0)
    conns.opens_connection(A, 0.0)
    conns.answered(A, 0.0, kept=True)
    conns.answered(A, 3.0, kept=True)
    at = 0.5 + KEEP_ALIVE_TRUST  # the first free one is past the trust, the second not
    assert [conns.opens_connection(A, at), conns.opens_connection(A, at)] == [False, True]


def test_idle_origins_are_forgotten() -> None:
    conns = OpenConnections()
    for n in range(100):
        conns.opens_connection(f"http://h{n}.example", 0.0)
        conns.answered(f"http://h{n}.example", 0.1, kept=True)
    assert len(conns) == 100
    conns.answered(A, 0.2 + KEEP_ALIVE_TRUST, kept=True)
    conns.opens_connection(B, 0.2 + KEEP_ALIVE_TRUST)
    assert len(conns) == 1  # only the origin answered lately
    assert conns.opens_connection(A, 0.3 + KEEP_ALIVE_TRUST) is False
    assert len(conns) == 0


#: Steps of time around the trust, where a wrong expiry shows.
STEPS = [0.0, 0.5, 1.0, 3.0, 3.9, KEEP_ALIVE_TRUST, 4.1, 6.0]
events = st.lists(
    st.tuples(st.sampled_from(["send", "kept", "closed"]), st.sampled_from([A, B]),
              st.sampled_from(STEPS)),
    max_size=60,
)  # fmt: skip


def reusable(conns: OpenConnections, origin: str, now: float) -> int:
    """How many sends in a row the guess would call reused now (on a copy)."""
    probe = copy.deepcopy(conns)
    count = 0
    while not probe.opens_connection(origin, now):
        count += 1
    return count


@given(events)
@example([("send", A, 0.0), ("send", A, 0.0), ("kept", A, 0.0), ("kept", A, 3.0),
          ("send", A, 1.5), ("send", A, 0.0)])  # fmt: skip
def test_the_guess_never_counts_more_connections_free_than_the_pool_has(
    script: list[tuple[str, str, float]],
) -> None:
    """Against a model pool that reuses its oldest free connection and loses each
    one idle past the trust (the server closed it), or closed by its answer: at
    every moment the guess counts no more free connections than the pool has,
    so a send that it calls reused always finds one free there."""
    conns = OpenConnections()
    free: dict[str, list[float]] = {A: [], B: []}
    busy = {A: 0, B: 0}
    now = 0.0
    for what, origin, step in script:
        now += step
        for name in (A, B):
            free[name] = [t for t in free[name] if now - t <= KEEP_ALIVE_TRUST]
            assert reusable(conns, name, now) <= len(free[name]), "more counted free"
        if what == "send":
            if not conns.opens_connection(origin, now):
                assert free[origin], "called reused with no connection free"
            if free[origin]:
                free[origin].pop(0)
            busy[origin] += 1
        elif busy[origin]:
            conns.answered(origin, now, kept=what == "kept")
            busy[origin] -= 1
            if what == "kept":
                free[origin].append(now)
