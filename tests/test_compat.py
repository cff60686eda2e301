"""What ``scrapy_aimd._compat`` relies on in Scrapy's engine.

If one of these fails after a Scrapy upgrade, ``wake_engine`` no longer wakes
the engine and held-back requests would wait for the 5-second heartbeat.
"""

import inspect
import subprocess
import sys

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


#: Run in a fresh process: no reactor installed, no loop running (Scrapy reactorless).
REACTORLESS = """
import asyncio
from scrapy.utils.asyncio import call_later
from scrapy_aimd._compat import call_later_if_running

try:
    call_later(1.0, print)
except RuntimeError:
    pass  # why call_later_if_running exists
else:
    raise AssertionError("Scrapy's call_later now works without a loop or a reactor")
assert call_later_if_running(1.0, print) is None

async def main() -> None:
    timer = call_later_if_running(0.01, print)
    assert timer is not None
    timer.cancel()

asyncio.run(main())
import twisted.internet.reactor
assert call_later_if_running(1.0, print) is not None
"""


def test_call_later_if_running_needs_a_loop_or_a_reactor() -> None:
    subprocess.run([sys.executable, "-c", REACTORLESS], check=True)
