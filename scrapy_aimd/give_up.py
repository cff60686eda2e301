"""``AIMD_HOST_GIVE_UP``: a host that only refuses or times out is given up on.

A host that answers 429 or 503 for ever, or never answers, would hold each of
its requests for a dozen throttled attempts at gaps of up to a minute: the
crawl would wait for it for hours. As Nutch and StormCrawler do, each host has
a budget: once it has gone this long without a success while it refused or
timed out, its queue ends. Each of its requests fails with :class:`HostGaveUp`
(the request's errback gets it); with a JOBDIR they stay in the frontier file,
so that a later run tries them again.
"""

from __future__ import annotations

from collections.abc import Collection

from scrapy.exceptions import IgnoreRequest

from scrapy_aimd.core.controller.answer import is_refusal

SETTING = "AIMD_HOST_GIVE_UP"
DEFAULT = 600.0
#: Set on a request of a host given up on: the feedback middleware fails it.
META = "aimd_host_gave_up"


class HostGaveUp(IgnoreRequest):
    """The request's host refused or timed out for ``AIMD_HOST_GIVE_UP`` seconds
    without a success: its requests are not tried again in this crawl."""


class GiveUpBudget:
    """When each host's trouble began; which hosts are given up on. The clock is
    an argument. ``budget`` 0 never gives up."""

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self._trouble_since: dict[str, float] = {}
        self.given_up: set[str] = set()

    def answered(
        self,
        host: str,
        now: float,
        *,
        status: int | None,
        timeout: bool,
        throttle_codes: Collection[int],
    ) -> bool:
        """An answer of the host, ``status`` None for a failure: a timeout or a
        throttle status is trouble, any other status a success, and a failure
        without either changes nothing. True when this uses up its budget."""
        if is_refusal(status, timeout, throttle_codes):
            return self.troubled(host, now)
        if status is not None:
            self.succeeded(host)
        return False

    def succeeded(self, host: str) -> None:
        """The host answered without refusing: its budget is whole again."""
        self._trouble_since.pop(host, None)

    def troubled(self, host: str, now: float) -> bool:
        """The host refused or timed out; True when this uses up its budget (once
        per host)."""
        since = self._trouble_since.setdefault(host, now)
        if self.budget <= 0 or host in self.given_up or now - since < self.budget:
            return False
        self.given_up.add(host)
        return True

    def trouble_for(self, host: str, now: float) -> float:
        """Seconds since the host's trouble began (0 without trouble)."""
        since = self._trouble_since.get(host)
        return 0.0 if since is None else now - since
