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
