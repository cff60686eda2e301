"""A real ``redis-server`` as a child process, for the fleet tests and benchmarks.

It listens on a free 127.0.0.1 port with persistence off (``--save ''
--appendonly no``) and is stopped (and waited for) after. Where ``redis-server``
is not installed, :data:`SKIP_REASON` says so loudly and the fleet tests skip
(Debian: ``apt-get install redis-server``; ``.ci/run`` installs it, so CI never
skips them).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis

#: The server binary: $REDIS_SERVER if set, else the first redis-server on PATH.
REDIS_SERVER = shutil.which(os.environ.get("REDIS_SERVER", "") or "redis-server")
SKIP_REASON = (
    "FLEET TESTS NOT RUN: redis-server is not installed "
    "(Debian: apt-get install redis-server; or set $REDIS_SERVER to its path)"
)
#: Seconds to wait for the server to answer PING.
START_TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One ``redis-server`` child; ``url`` is where it listens."""

    def __init__(self, *extra: str) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError(SKIP_REASON)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.TemporaryDirectory(prefix="aimd-redis-")
        self.log = Path(self._dir.name) / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._extra = extra

    def start(self) -> RedisServer:
        assert REDIS_SERVER is not None
        command = [
            REDIS_SERVER,
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self._dir.name,
            "--logfile",
            str(self.log),
            "--daemonize",
            "no",
            *self._extra,
        ]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited at start: {self.log.read_text()!r}")
            if self._answers():
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: the server is gone at once, as a crashed or unplugged one."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()


@contextlib.contextmanager
def redis_server(*extra: str) -> Iterator[RedisServer]:
    """A started server, stopped and cleaned up after the block."""
    server = RedisServer(*extra)
    try:
        yield server.start()
    finally:
        server.close()


def serve() -> Iterator[RedisServer]:
    """For a pytest fixture: ``server = pytest.fixture(scope="module")(serve)``."""
    with redis_server() as server:
        yield server


def serve_url() -> Iterator[str]:
    """For a pytest fixture: the URL of a server of the test's own, for crawl
    processes that must not share it (``redis_url = pytest.fixture(serve_url)``)."""
    with redis_server() as server:
        yield server.url


def connect(server: RedisServer) -> Iterator[redis.Redis]:
    """For a pytest fixture: a plain client of the module's ``server`` fixture, to
    read and damage the fleet's keys directly (``raw = pytest.fixture(connect)``)."""
    import redis

    with redis.Redis.from_url(server.url) as client:
        yield client


_prefixes = itertools.count()


def fleet_prefix() -> str:
    """For a pytest fixture: a key prefix that no other test uses."""
    return f"aimd:test{next(_prefixes)}"
