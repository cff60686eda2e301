"""A small HTTP site in a thread of the test, for crawls against a site that a
test describes in a few lines: ``answer(path)`` says what each request gets.

One place for the handler and the server's start and stop, so that every such
site logs nothing, closes its socket after the test and records what it was
asked the same way. The simulated sites of ``sitefarm`` run in a process of
their own; this is for the odd behaviour that only one test needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer

#: What a request gets: status, headers (a list of pairs when a header comes
#: twice), a body: bytes (sent with a Content-Length) or a function giving the
#: chunks to stream without one.
Answer = tuple[
    int, Mapping[str, str] | Sequence[tuple[str, str]], bytes | Callable[[], Iterable[bytes]]
]


@dataclass
class LocalSite:
    """Where a site listens, and what it was asked."""

    #: ``http://<host>:<port>``, without a trailing slash.
    url: str
    #: (path, Host header) of each request, in arrival order.
    asked: list[tuple[str, str]] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.asked]


@contextmanager
def running(server: HTTPServer) -> Iterator[None]:
    """``server`` serving from a daemon thread; shut down and closed after."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serve(answer: Callable[[str], Answer], host: str = "127.0.0.1") -> Iterator[LocalSite]:
    """A site on ``host`` (a free port) that answers each request with
    ``answer(path)``; the request is in ``asked`` before ``answer`` is called."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            site.asked.append((self.path, self.headers.get("Host", "")))
            status, headers, body = answer(self.path)
            self.send_response(status)
            for name, value in headers.items() if isinstance(headers, Mapping) else headers:
                self.send_header(name, value)
            if isinstance(body, bytes):
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for chunk in [body] if isinstance(body, bytes) else body():
                    self.wfile.write(chunk)
            except OSError:
                pass  # the crawler stopped reading

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    site = LocalSite(f"http://{host}:{server.server_address[1]}")
    with running(server):
        yield site
