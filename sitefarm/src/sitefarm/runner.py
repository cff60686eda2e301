"""Running a farm beside a crawl: as a subprocess (so the crawler's event loop and timing
are untouched) or, for the farm's own tests, in a thread of the current process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sitefarm.server import Farm
from sitefarm.spec import HostSpec, specs_to_json, validate_farm

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

#: The directory that holds the sitefarm package (``src``), for a child that runs from a
#: source tree where sitefarm is not installed.
_SOURCE_ROOT = Path(__file__).resolve().parents[1]


class FarmError(RuntimeError):
    """The farm did not start, or died on its own."""


def read_log_file(path: str | Path) -> list[dict[str, Any]]:
    """The records of a farm log; a last line still being written is left out."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    return [json.loads(line) for line in lines[:-1] if line]


def _stop_process(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Close stdin (the farm exits on EOF), then SIGTERM, then SIGKILL."""
    if process.stdin is not None and not process.stdin.closed:
        with contextlib.suppress(OSError):
            process.stdin.close()
    for action in (None, process.terminate, process.kill):
        if action is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                action()
        try:
            process.wait(timeout)
            break
        except subprocess.TimeoutExpired:
            continue
    if process.stdout is not None:
        process.stdout.close()


class FarmProcess:
    """A farm in a child process. Use ``with start_farm(...) as farm:``, or call ``stop()``;
    the child also exits when this process dies, since its stdin then closes."""

    def __init__(
        self,
        specs: list[HostSpec],
        log_path: str | Path | None = None,
        *,
        max_seconds: float | None = None,
        startup_timeout: float = 15.0,
        clock: str = "start",
    ) -> None:
        validate_farm(specs)
        self.specs = list(specs)
        self._temp_dir = tempfile.TemporaryDirectory(prefix="sitefarm-")
        temp = Path(self._temp_dir.name)
        self.log_path = Path(log_path) if log_path is not None else temp / "requests.jsonl"
        self.urls: dict[str, str] = {}
        self.started = 0.0
        self._final_log: list[dict[str, Any]] | None = None
        self._stderr_path = temp / "stderr.txt"
        config = temp / "farm.json"
        config.write_text(json.dumps(specs_to_json(self.specs)), encoding="utf-8")
        command = [sys.executable, "-m", "sitefarm", str(config)]
        command += ["--log", str(self.log_path)]
        if max_seconds is not None:
            command += ["--max-seconds", str(max_seconds)]
        if clock != "start":
            command += ["--clock", clock]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_SOURCE_ROOT), env.get("PYTHONPATH", "")) if p
        )
        self._stderr: IO[bytes] = open(self._stderr_path, "wb")  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                env=env,
                # Its own session: a Ctrl-C meant for the crawler must not kill the site
                # under the crawler's graceful shutdown. Stdin EOF still ends it with us.
                start_new_session=True,
            )
        except BaseException:
            self._stderr.close()
            self._temp_dir.cleanup()
            raise
        self._finalizer = weakref.finalize(self, _stop_process, self.process, 2.0)
        try:
            ready = self._read_ready_line(startup_timeout)
        except BaseException:
            with contextlib.suppress(FarmError):
                self.stop()
            raise
        self.urls = dict(ready["hosts"])
        self.started = float(ready["started"])

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read_ready_line(self, timeout: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while b"\n" not in buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise FarmError(
                        f"the farm was not ready after {timeout} s{self._stderr_tail()}"
                    )
                if not selector.select(remaining):
                    continue
                chunk = os.read(self.process.stdout.fileno(), 65536)
                if not chunk:
                    self.process.wait(5)
                    raise FarmError(
                        f"the farm exited with {self.process.returncode} before it was ready"
                        f"{self._stderr_tail()}"
                    )
                buffer += chunk
        result: dict[str, Any] = json.loads(buffer.split(b"\n", 1)[0])
        return result

    def _stderr_tail(self) -> str:
        with contextlib.suppress(OSError):
            self._stderr.flush()
            text = self._stderr_path.read_text(encoding="utf-8", errors="replace").strip()
            if text:
                return ":\n" + text[-3000:]
        return ""

    def url(self, name: str, path: str = "/") -> str:
        return self.urls[name] + path

    def read_log(self, min_records: int = 0, timeout: float = 5.0) -> list[dict[str, Any]]:
        """The records so far; waits up to ``timeout`` for at least ``min_records`` (a
        record is written once its response is sent, a moment after the client has it)."""
        if self._final_log is not None:
            return list(self._final_log)
        deadline = time.monotonic() + timeout
        while True:
            records = read_log_file(self.log_path)
            if len(records) >= min_records or time.monotonic() >= deadline:
                return records
            time.sleep(0.01)

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 5.0) -> int:
        """Stop the farm and return its exit code; 0 is a clean stop. Idempotent."""
        crashed = self.process.poll() not in (None, 0)
        _stop_process(self.process, timeout)
        self._finalizer.detach()
        if self._final_log is None:
            self._final_log = read_log_file(self.log_path)
            tail = self._stderr_tail()
            self._stderr.close()
            self._temp_dir.cleanup()
            if crashed:
                raise FarmError(f"the farm died with {self.process.returncode}{tail}")
        return self.process.returncode

    def __enter__(self) -> FarmProcess:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.stop()
        else:
            with contextlib.suppress(FarmError):
                self.stop()


def start_farm(
    specs: list[HostSpec],
    log_path: str | Path | None = None,
    *,
    max_seconds: float | None = None,
    startup_timeout: float = 15.0,
    clock: str = "start",
) -> FarmProcess:
    """Start the farm in a child process and return once every host listens.

    ``log_path`` None: the log lives in a temporary directory removed at ``stop()``, after
    which ``read_log()`` still returns the final records. ``max_seconds`` bounds the
    child's life whatever happens to this process. ``clock``: see ``server.CLOCKS``.
    """
    return FarmProcess(
        specs, log_path, max_seconds=max_seconds, startup_timeout=startup_timeout, clock=clock
    )


class FarmThread:
    """A farm in a thread of this process: quicker to start than a subprocess, for tests of
    the farm itself. Its records are read straight from memory."""

    def __init__(
        self, specs: list[HostSpec], log_path: str | Path | None = None, *, clock: str = "start"
    ) -> None:
        self.farm = Farm(specs, log_path, clock=clock)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="sitefarm", daemon=True)
        self._thread.start()
        if not self._ready.wait(15.0):
            raise FarmError("the farm thread did not start")
        if self._error is not None:
            self._thread.join(5.0)
            raise FarmError(f"the farm did not start: {self._error}") from self._error

    def _run(self) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            try:
                await self.farm.start()
            except BaseException as error:
                self._error = error
                self._ready.set()
                return
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await self.farm.close()

        try:
            self._loop.run_until_complete(main())
        finally:
            self._loop.close()

    @property
    def urls(self) -> dict[str, str]:
        return self.farm.urls

    @property
    def started(self) -> float:
        return self.farm.started

    def url(self, name: str, path: str = "/") -> str:
        return self.farm.urls[name] + path

    def read_log(self, min_records: int = 0, timeout: float = 5.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            records = self.farm.records
            if len(records) >= min_records or time.monotonic() >= deadline:
                return records
            time.sleep(0.005)

    def stop(self) -> None:
        if self._thread.is_alive() and self._stop is not None:
            stop = self._stop
            with contextlib.suppress(RuntimeError):  # the loop already closed
                self._loop.call_soon_threadsafe(stop.set)
            self._thread.join(10.0)

    def __enter__(self) -> FarmThread:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def farm_in_thread(
    specs: list[HostSpec], log_path: str | Path | None = None, *, clock: str = "start"
) -> Iterator[FarmThread]:
    farm = FarmThread(specs, log_path, clock=clock)
    try:
        yield farm
    finally:
        farm.stop()


async def serve(
    specs: list[HostSpec],
    log_path: str | Path | None,
    *,
    max_seconds: float | None = None,
    watch_stdin: bool = True,
    on_ready: Callable[[Farm], None] | None = None,
    clock: str = "start",
) -> None:
    """The child's main loop: serve until SIGTERM, SIGINT, stdin EOF or ``max_seconds``."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    stdin_watched = False
    if watch_stdin:
        stdin_watched = _watch_stdin(loop, stop)
    farm = Farm(specs, log_path, keep_records=False, clock=clock)
    await farm.start()
    try:
        if on_ready is not None:
            on_ready(farm)
        if max_seconds is not None:
            loop.call_later(max_seconds, stop.set)
        elif not stdin_watched:
            print(
                "sitefarm: stdin is not a pipe or terminal; stop me with SIGTERM", file=sys.stderr
            )
        await stop.wait()
    finally:
        if stdin_watched:
            with contextlib.suppress(Exception):
                loop.remove_reader(sys.stdin.fileno())
        await farm.close()


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> bool:
    """Stop on EOF of stdin, so that the farm never outlives a parent that holds the pipe.
    Only a pipe, socket or terminal can be watched; /dev/null or a file would end at once."""
    import stat

    try:
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
        return False

    def on_readable() -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            stop.set()

    loop.add_reader(fd, on_readable)
    return True
