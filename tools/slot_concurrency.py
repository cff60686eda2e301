"""How many requests stock Scrapy has at once at one server, against its
``CONCURRENT_REQUESTS_PER_DOMAIN``: ``python tools/slot_concurrency.py``.

A threaded server on 127.0.0.1 counts the requests it serves at once (each
takes 0.2 s); a spider without the add-on queues 20 of them at once. Each
crawl runs in its own process, once with Scrapy's default reactor (asyncio)
and once with ``EPollReactor``. Pass ``--addon`` to crawl with scrapy-aimd.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PER_DOMAIN = 2
REQUESTS = 20


class _Counting(BaseHTTPRequestHandler):
    lock = threading.Lock()
    now = 0
    most = 0

    def do_GET(self) -> None:
        cls = type(self)
        with cls.lock:
            cls.now += 1
            cls.most = max(cls.most, cls.now)
        time.sleep(0.2)
        with cls.lock:
            cls.now -= 1
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


def crawl(reactor: str | None, addon: bool) -> int:
    """One crawl in this process; the most requests the server had at once."""
    import scrapy
    from scrapy.crawler import CrawlerProcess

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]

    class Twenty(scrapy.Spider):
        name = "twenty"

        async def start(self) -> Any:
            for i in range(REQUESTS):
                yield scrapy.Request(f"http://127.0.0.1:{port}/{i}")

        def parse(self, response: Any) -> None:
            pass

    settings: dict[str, Any] = {
        "CONCURRENT_REQUESTS_PER_DOMAIN": PER_DOMAIN,
        "LOG_LEVEL": "ERROR",
        "TELNETCONSOLE_ENABLED": False,
    }
    if reactor:
        settings["TWISTED_REACTOR"] = reactor
    if addon:
        settings["ADDONS"] = {"scrapy_aimd.Addon": 500}
    process = CrawlerProcess(settings)
    process.crawl(Twenty)
    process.start()
    server.shutdown()
    return _Counting.most


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--addon", action="store_true", help="crawl with scrapy-aimd")
    parser.add_argument("--one", metavar="REACTOR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(crawl(args.one or None, args.addon))
        return
    for name, reactor in (
        ("asyncio (Scrapy's default)", ""),
        ("EPollReactor", "twisted.internet.epollreactor.EPollReactor"),
    ):
        command = [sys.executable, __file__, "--one", reactor]
        if args.addon:
            command.append("--addon")
        most = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
        print(
            f"{name}: {most} at once at the server, CONCURRENT_REQUESTS_PER_DOMAIN = {PER_DOMAIN}"
            f"{' (scrapy-aimd)' if args.addon else ''}"
        )


if __name__ == "__main__":
    main()
