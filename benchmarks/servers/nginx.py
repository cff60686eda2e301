"""Run Debian's stock nginx as a child process with the benchmark's hosts, on loopback.

Every crawl gets a fresh nginx (fresh limit zones, an empty access log), started in the
foreground from a config written into a directory of its own, with every path it
writes (pid, logs, temp files) inside that directory, so that it needs no root.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .hosts import NginxHost

TEMPLATE = Path(__file__).resolve().parent / "nginx.conf.in"
#: Debian's package puts it here; ``$NGINX`` or the PATH may name another.
DEFAULT_NGINX = "/usr/sbin/nginx"
#: The hosts listen on 127.0.0.2 upwards, each on a free port of its own.
FIRST_ADDRESS = 2
START_SECONDS = 10.0
STOP_SECONDS = 10.0


def find_nginx() -> str | None:
    """The nginx binary: ``$NGINX``, Debian's path, or the PATH; None when absent."""
    for candidate in (os.environ.get("NGINX"), DEFAULT_NGINX, shutil.which("nginx")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Listening:
    host: NginxHost
    address: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"


def render_config(directory: Path, listening: list[Listening], roots: dict[str, Path]) -> str:
    # Under root, workers would switch to "nobody", who cannot read a private temp dir.
    user = f"user {getpass.getuser()};" if os.geteuid() == 0 else ""
    zones = [zone for item in listening for zone in item.host.zones()]
    servers = [
        item.host.server_block(item.address, item.port, str(roots[item.host.name]))
        for item in listening
    ]
    return (
        TEMPLATE.read_text()
        .replace("{{user}}", user)
        .replace("{{dir}}", str(directory))
        .replace("{{zones}}", "\n".join(f"    {zone}" for zone in zones))
        .replace("{{servers}}", "\n\n".join(servers))
    )


def wait_listening(
    items: list[Listening], process: subprocess.Popen[bytes], directory: Path
) -> None:
    deadline = time.monotonic() + START_SECONDS
    pending = list(items)
    while pending:
        if process.poll() is not None:
            logs = [directory / "stderr.log", directory / "error.log"]
            error = "".join(log.read_text(errors="replace") for log in logs if log.exists())
            raise RuntimeError(f"nginx exited ({process.returncode}) at start:\n{error[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"nginx did not listen on {pending[0].url} in {START_SECONDS} s")
        try:
            with socket.create_connection((pending[0].address, pending[0].port), timeout=0.5):
                pending.pop(0)
        except OSError:
            time.sleep(0.05)


def wait_port(
    address: str, port: int, process: subprocess.Popen[bytes], log: Path, name: str
) -> None:
    """Until ``address:port`` accepts connections; an error with ``log``'s tail when
    the server exits or does not listen in START_SECONDS."""
    deadline = time.monotonic() + START_SECONDS
    while True:
        if process.poll() is not None:
            error = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"{name} exited ({process.returncode}) at start:\n{error[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not listen on {address}:{port} in {START_SECONDS} s")
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)


def stop(process: subprocess.Popen[bytes]) -> None:
    """A graceful stop (SIGQUIT: finish the requests in flight, flush the logs), then a
    kill if nginx has not gone in STOP_SECONDS."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGQUIT)
    try:
        process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_SECONDS)


@contextmanager
def run_nginx(
    directory: Path, hosts: tuple[NginxHost, ...], roots: dict[str, Path], nginx: str
) -> Iterator[list[Listening]]:
    """nginx serving ``hosts`` (document roots in ``roots``), with its config, logs and
    pid in ``directory``; stopped on leaving, so the access log is complete."""
    (directory / "tmp").mkdir(parents=True, exist_ok=True)
    listening = []
    for number, host in enumerate(hosts, FIRST_ADDRESS):
        address = f"127.0.0.{number}"
        listening.append(Listening(host, address, free_port(address)))
    config = directory / "nginx.conf"
    config.write_text(render_config(directory, listening, roots))
    error_log = directory / "error.log"
    with (directory / "stderr.log").open("wb") as stderr:
        process = subprocess.Popen(
            [
                nginx,
                "-p",
                str(directory),
                "-c",
                str(config),
                "-e",
                str(error_log),
                "-g",
                "daemon off;",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        wait_listening(listening, process, directory)
        yield listening
    finally:
        stop(process)
