"""Run Debian's Apache with mod_evasive as a child process, serving the static site.

Apache refuses to serve as root: under root its children run as ``www-data``, which
cannot read a private temporary directory, so the site is copied into a directory of
its own that they may read. The config, pid file, logs and ``ServerRoot`` are in the
run's directory; one child process with many threads, so that mod_evasive's counts
(kept per process) see every request."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .accesslog import Entry
from .limiters import LimitedHost
from .nginx import free_port, wait_port

DEFAULT_APACHE = "/usr/sbin/apache2"
MODULES = Path("/usr/lib/apache2/modules")
#: What the config loads: the event MPM, access control, MIME types, index pages and
#: mod_evasive (``libapache2-mod-evasive``).
NEEDED = {
    "mpm_event_module": "mod_mpm_event.so",
    "authz_core_module": "mod_authz_core.so",
    "mime_module": "mod_mime.so",
    "dir_module": "mod_dir.so",
    "evasive20_module": "mod_evasive20.so",
}
RUN_AS = "www-data"
STOP_SECONDS = 10.0
#: The request's end (epoch seconds and milliseconds), status, microseconds taken,
#: where it came in, body bytes, the client's port (one a connection), request line.
LOG_FORMAT = "%{end:sec}t.%{end:msec_frac}t %>s %D %A %{local}p %B %{remote}p %r"


def find_apache() -> str | None:
    """The apache2 binary with every module the config needs, or None."""
    for candidate in (os.environ.get("APACHE2"), DEFAULT_APACHE, shutil.which("apache2")):
        modules = all((MODULES / name).exists() for name in NEEDED.values())
        if candidate and os.access(candidate, os.X_OK) and modules:
            return candidate
    return None


@dataclass(frozen=True)
class Listener:
    host: LimitedHost
    address: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"


def render_config(directory: Path, listener: Listener, root: Path) -> str:
    host = listener.host
    modules = [f"LoadModule {name} {MODULES / file}" for name, file in NEEDED.items()]
    user = [f"User {RUN_AS}", f"Group {RUN_AS}"] if os.geteuid() == 0 else []
    lines = [
        f"# Written by benchmarks/bench_servers.py for one crawl. {host.what}",
        f"ServerRoot {directory}",
        f"PidFile {directory}/apache2.pid",
        f"DefaultRuntimeDir {directory}",
        f"ServerName {listener.address}",
        f"Listen {listener.address}:{listener.port}",
        *modules,
        *user,
        "StartServers 1",
        "ServerLimit 1",
        "ThreadsPerChild 64",
        "MaxRequestWorkers 64",
        "MinSpareThreads 1",
        "MaxSpareThreads 64",
        "KeepAlive On",
        "MaxKeepAliveRequests 0",
        "KeepAliveTimeout 75",
        f"ErrorLog {directory}/error.log",
        f'LogFormat "{LOG_FORMAT}" bench',
        f"CustomLog {directory}/access.log bench",
        "TypesConfig /etc/mime.types",
        f"DocumentRoot {root}",
        "DirectoryIndex index.html",
        "ErrorDocument 404 /404.html",
        "<Directory />",
        "    Require all granted",
        "</Directory>",
        "DOSHashTableSize 3097",
        f"DOSPageCount {host.limit}",
        f"DOSPageInterval {host.period:g}",
        f"DOSSiteCount {host.limit}",
        f"DOSSiteInterval {host.period:g}",
        f"DOSBlockingPeriod {host.block_seconds}",
        f"DOSLogDir {directory}/evasive",
    ]
    return "\n".join(lines) + "\n"


def parse_line(line: str) -> Entry:
    ended, status, micros, address, port, size, client, request = line.split(" ", 7)
    parts = request.split(" ")
    uri = parts[1] if len(parts) == 3 else request
    return Entry(
        float(ended),
        int(status),
        int(micros) / 1e6,
        address,
        address,
        int(port),
        int(size),
        int(client),
        uri,
        uri.split("?", 1)[0],
    )


def read_log(path: Path) -> list[Entry]:
    if not path.exists():
        return []
    return [parse_line(line) for line in path.read_text().splitlines() if line.strip()]


def readable_copy(root: Path) -> Path:
    """A copy of the site that ``www-data`` may read."""
    copy = Path(tempfile.mkdtemp(prefix="bench-apache-site-"))
    os.chmod(copy, 0o755)
    shutil.copytree(root, copy, dirs_exist_ok=True)
    for path, folders, files in os.walk(copy):
        for folder in folders:
            os.chmod(Path(path) / folder, 0o755)
        for file in files:
            os.chmod(Path(path) / file, 0o644)
    return copy


@contextmanager
def run_apache(
    directory: Path, host: LimitedHost, root: Path, apache: str, address_number: int
) -> Iterator[Listener]:
    """Apache serving ``root`` as ``host`` on 127.0.0.{address_number}; stopped on
    leaving, so that its log is complete."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "evasive").mkdir(exist_ok=True)
    served = root
    if os.geteuid() == 0:
        shutil.chown(directory / "evasive", RUN_AS)
        served = readable_copy(root)
    address = f"127.0.0.{address_number}"
    listener = Listener(host, address, free_port(address))
    config = directory / "apache2.conf"
    config.write_text(render_config(directory, listener, served))
    try:
        with (directory / "stderr.log").open("wb") as stderr:
            process = subprocess.Popen(
                [apache, "-f", str(config), "-d", str(directory), "-DFOREGROUND"],
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
            )
        try:
            wait_port(address, listener.port, process, directory / "stderr.log", "apache2")
            yield listener
        finally:
            stop(process)
    finally:
        if served != root:
            shutil.rmtree(served, ignore_errors=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM: Apache stops its children and exits (its log is written line by line)."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_SECONDS)
