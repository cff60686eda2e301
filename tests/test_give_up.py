"""AIMD_HOST_GIVE_UP's budget, with a fake clock."""

from __future__ import annotations

from scrapy_aimd.give_up import GiveUpBudget


def test_a_host_is_given_up_on_once_past_its_budget_of_trouble() -> None:
    budget = GiveUpBudget(10.0)
    assert not budget.troubled("a", 0.0)
    assert not budget.troubled("a", 9.9)
    assert budget.troubled("a", 10.0)
    assert not budget.troubled("a", 20.0)  # once per host
    assert budget.given_up == {"a"}


def test_a_success_makes_the_budget_whole_again() -> None:
    budget = GiveUpBudget(10.0)
    budget.troubled("a", 0.0)
    budget.succeeded("a")
    assert not budget.troubled("a", 10.0)
    assert budget.trouble_for("a", 15.0) == 5.0
    assert budget.troubled("a", 20.0)


def test_a_budget_of_zero_never_gives_up() -> None:
    budget = GiveUpBudget(0.0)
    budget.troubled("a", 0.0)
    assert not budget.troubled("a", 1e9)


def test_an_answer_is_trouble_a_success_or_nothing_by_its_status() -> None:
    """The one rule both schedulers feed the budget by: a throttle status or a
    timeout is trouble, any other status a success, a failure without a status
    nothing."""
    budget = GiveUpBudget(10.0)
    codes = frozenset({429, 503})

    def answer(at: float, status: int | None, timeout: bool = False) -> bool:
        return budget.answered("a", at, status=status, timeout=timeout, throttle_codes=codes)

    assert not answer(0.0, 429)
    assert not answer(5.0, None)  # a connection refused: still in trouble since 0
    assert not answer(6.0, 404)  # an answer, not a refusal: whole again
    assert not answer(7.0, 503)
    assert not answer(16.0, None, timeout=True)
    assert answer(17.0, 429)  # 10 s of trouble since 7
    assert budget.given_up == {"a"}
