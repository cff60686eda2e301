"""What ``scrapy_aimd._compat`` relies on in Scrapy's engine.

If one of these fails after a Scrapy upgrade, ``wake_engine`` no longer wakes
the engine and held-back requests would wait for the 5-second heartbeat.
"""

import inspect

from scrapy.core.engine import ExecutionEngine, _Slot
from scrapy.utils.reactor import CallLaterOnce


def test_engine_slot_has_a_nextcall_that_schedules_without_delay() -> None:
    assert "nextcall" in inspect.signature(_Slot.__init__).parameters
    assert "_slot" in inspect.getsource(ExecutionEngine.open_spider_async)
    schedule = inspect.signature(CallLaterOnce.schedule)
    assert schedule.parameters["delay"].default == 0


def test_engine_loops_next_request_in_nextcall() -> None:
    source = inspect.getsource(ExecutionEngine.open_spider_async)
    assert "CallLaterOnce(self._start_scheduled_requests)" in source
