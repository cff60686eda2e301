"""Fleet crawls for the tests and the benchmark: N crawl processes (the real
``tests/crawlrunner.py``) on one farm, sharing a real redis-server child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawling import AIMD, ROOT, RUNNER

if TYPE_CHECKING:
    from sitefarm import FarmProcess

#: Settings of every worker in the fleet tests: short leases (a 3 s timeout:
#: 8 s), a quick close.
FLEET = {
    "AIMD_FLEET_IDLE_CLOSE": 1.0,
    "DOWNLOAD_TIMEOUT": 3,
    "CONCURRENT_REQUESTS": 8,
    "AIMD_MAX_CONCURRENCY": 3,
}


@dataclass
class Worker:
    """One crawl process of the fleet."""

    process: subprocess.Popen[bytes]
    out: Path
    started: float
    code: int | None = None
    stderr: str = field(default="", repr=False)

    def stats(self) -> dict[str, Any]:
        path = self.out / "stats.json"
        stats: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        return stats

    def log(self) -> str:
        path = self.out / "crawl.log"
        return path.read_text() if path.exists() else ""

    def events(self) -> list[dict[str, Any]]:
        path = self.out / "events.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]


def start_worker(
    start_urls: list[str],
    out: Path,
    redis_url: str | None,
    settings: dict[str, Any] | None = None,
    runner: list[str] | None = None,
    spider: str | None = None,
) -> Worker:
    """A crawl process of the fleet, started (not waited for); without
    ``redis_url``, a single process. ``runner``: the command that takes the
    config file's path (default: ``tests/crawlrunner.py``); ``spider``: the
    import path of the spider it runs (default: its ``FarmSpider``)."""
    out.mkdir(parents=True, exist_ok=True)
    config = out / "config.json"
    config.write_text(
        json.dumps(
            {
                "start_urls": start_urls,
                "settings": {
                    **AIMD,
                    **({"AIMD_REDIS_URL": redis_url} if redis_url else {}),
                    "AIMD_EVENTS_FILE": str(out / "events.jsonl"),
                    **(settings or {}),
                },
                "out": str(out),
                "spider": spider,
            }
        )
    )
    paths = [str(ROOT), str(RUNNER.parent), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    process = subprocess.Popen(
        [*(runner or [sys.executable, str(RUNNER)]), str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return Worker(process, out, time.time())


def wait_for(workers: list[Worker], timeout: float = 120) -> None:
    """Until every worker has exited (killed after ``timeout``)."""
    deadline = time.monotonic() + timeout
    for worker in workers:
        try:
            _, err = worker.process.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.process.kill()
            _, err = worker.process.communicate()
        worker.code = worker.process.returncode
        worker.stderr = (err or b"").decode(errors="replace")


def urls_of(farm: FarmProcess) -> list[str]:
    """The farm's start URLs: each host's root."""
    return [url + "/" for url in farm.urls.values()]


def assert_finished(fleet: list[Worker]) -> None:
    for worker in fleet:
        assert worker.code == 0, worker.stderr[-3000:]
        assert worker.stats().get("finish_reason") == "finished", worker.log()[-3000:]
