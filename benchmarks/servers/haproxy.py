"""Run Debian's HAProxy as a child process: one frontend per limited host, each with
its own stick table, in front of one origin (an nginx serving the static site).

HAProxy writes one log line per request to its standard output (``log stdout``), which
the benchmark reads back as entries like nginx's access log."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .accesslog import Entry
from .limiters import LimitedHost
from .nginx import free_port, wait_port

DEFAULT_HAPROXY = "/usr/sbin/haproxy"
STOP_SECONDS = 10.0
#: When the request came (the connection's accept date, its handshake and idle time
#: after it), how long it took, the status, where it came in, the bytes sent, the
#: client's port (one a connection) and the URI as asked.
#: "bench" first: HAProxy writes its own notices (a proxy stopped ...) there too.
LOG_FORMAT = "bench %Ts.%ms %Th %Ti %Ta %ST %fi %fp %B %cp %HU"
MARK = "bench "


def find_haproxy() -> str | None:
    """The haproxy binary: ``$HAPROXY``, Debian's path, or the PATH; None when absent."""
    for candidate in (os.environ.get("HAPROXY"), DEFAULT_HAPROXY, shutil.which("haproxy")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass(frozen=True)
class Frontend:
    host: LimitedHost
    address: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"


def render_config(frontends: list[Frontend], origin: tuple[str, int]) -> str:
    lines = [
        "# Written by benchmarks/bench_servers.py for one crawl; haproxy -f THIS -db",
        "global",
        "    log stdout format raw local0",
        "    maxconn 4096",
        "defaults",
        "    mode http",
        "    log global",
        "    option http-keep-alive",
        "    option dontlognull",  # the start-up probes: connections with no request
        "    timeout connect 5s",
        "    timeout client 120s",
        "    timeout server 120s",
        "    timeout http-keep-alive 75s",
        f'    log-format "{LOG_FORMAT}"',
    ]
    for item in frontends:
        host = item.host
        deny = "deny" if host.status == 403 else f"deny deny_status {host.status}"
        lines += [
            f"frontend {host.name}  # {host.what}",
            f"    bind {item.address}:{item.port}",
            f"    stick-table type ip size 1k expire 120s store http_req_rate({host.period:g}s)",
            "    http-request track-sc0 src",
            f"    http-request {deny} if {{ sc_http_req_rate(0) gt {host.limit} }}",
            "    default_backend origin",
        ]
    lines += ["backend origin", f"    server static {origin[0]}:{origin[1]}"]
    return "\n".join(lines) + "\n"


def parse_line(line: str) -> Entry:
    """One line of ``LOG_FORMAT`` (without its mark): the request's end is when it came
    plus ``%Ta``."""
    accepted, handshake, idle, active, status, address, port, size, client, uri = line.split(" ", 9)
    came = float(accepted) + (max(0, int(handshake)) + max(0, int(idle))) / 1000
    seconds = max(0, int(active)) / 1000
    return Entry(
        came + seconds,
        int(status),
        seconds,
        address,
        address,
        int(port),
        max(0, int(size)),
        int(client),
        uri,
        uri.split("?", 1)[0],
    )


def read_log(path: Path) -> list[Entry]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [parse_line(line[len(MARK) :]) for line in lines if line.startswith(MARK)]


@contextmanager
def run_haproxy(
    directory: Path,
    hosts: list[LimitedHost],
    origin: tuple[str, int],
    haproxy: str,
    first_address: int,
) -> Iterator[list[Frontend]]:
    """HAProxy serving ``hosts`` on 127.0.0.{first_address} upwards, its config in
    ``directory`` and its log in ``directory/access.log``; stopped on leaving."""
    directory.mkdir(parents=True, exist_ok=True)
    frontends = []
    for number, host in enumerate(hosts, first_address):
        address = f"127.0.0.{number}"
        frontends.append(Frontend(host, address, free_port(address)))
    config = directory / "haproxy.cfg"
    config.write_text(render_config(frontends, origin))
    with (
        (directory / "access.log").open("wb") as log,
        (directory / "stderr.log").open("wb") as stderr,
    ):
        process = subprocess.Popen(
            [haproxy, "-f", str(config), "-db"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=stderr,
        )
    try:
        for item in frontends:
            wait_port(item.address, item.port, process, directory / "stderr.log", "haproxy")
        yield frontends
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGUSR1: a soft stop (the requests in flight end, the log is written)."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGUSR1)
    try:
        process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_SECONDS)
