"""The farm's HTTP/1.1 server: one asyncio listener per host, every request logged.

Minimal and strict where a bug would hide (a malformed request gets 400, never a crash;
Content-Length always set), fast enough that the crawler, not the farm, is what a test or
a benchmark measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import math
import random
import socket
import struct
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from email.utils import formatdate
from html import escape
from http import HTTPStatus
from pathlib import Path
from typing import IO, Any

from sitefarm.spec import (
    QUERY_VARIANT,
    HostSpec,
    Redirect,
    RetryAfter,
    SpecError,
    validate_farm,
)
from sitefarm.urls import VARIANT_KINDS, Target, link_variant, parse_target

MAX_LINE = 8192
MAX_HEADERS = 100
MAX_BODY = 1 << 20
#: Seconds a keep-alive connection may sit idle, and a request may take to arrive whole.
IDLE_TIMEOUT = 30.0
FIRST_AUTO_ADDRESS = ipaddress.ip_address("127.0.0.2")
_PHRASES = {status.value: status.phrase for status in HTTPStatus}
#: When the clock of pauses, outages and token buckets starts: when the farm listens, or
#: at the first request any host receives (so that a benchmark's bounds count from the
#: crawl's first request, not from the crawler's start-up).
CLOCKS = ("start", "first_request")


@dataclass
class Request:
    method: str = ""
    target: str = ""
    version: str = "HTTP/1.1"
    headers: dict[str, str] = field(default_factory=dict)
    arrived: float = 0.0
    error: int | None = None
    """A status for a request that cannot be served (400, 413, 431, 501)."""

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in connection
        return "close" not in connection


@dataclass
class Reply:
    status: int
    reason: str
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    page: str | None = None
    delay: float = 0.0
    close: bool = False
    reset: bool = False
    retry_after: str | None = None


class RequestLog:
    """Every request as one JSON line, flushed when the event loop goes idle (so a reader in
    another process sees it within a loop iteration), and kept in memory if asked."""

    def __init__(self, path: str | Path | None, keep_records: bool) -> None:
        self.path = Path(path) if path is not None else None
        self.records: list[dict[str, Any]] | None = [] if keep_records else None
        self._file: IO[str] | None = (
            open(self.path, "w", encoding="utf-8") if self.path is not None else None  # noqa: SIM115
        )
        self._flush_scheduled = False

    def add(self, record: dict[str, Any]) -> None:
        if self.records is not None:
            self.records.append(record)
        if self._file is not None:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            if not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if self._file is not None and not self._file.closed:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.flush()
            self._file.close()


_date_cache: tuple[int, str] = (0, "")


def http_date(now: float) -> str:
    global _date_cache
    second = int(now)
    if _date_cache[0] != second:
        _date_cache = (second, formatdate(second, usegmt=True))
    return _date_cache[1]


def retry_after_value(setting: RetryAfter, seconds: float, now: float) -> str | None:
    """The Retry-After header for a setting (see ``RetryAfter``) and the computed wait."""
    if setting is None:
        return None
    if setting == "auto":
        return str(max(1, math.ceil(seconds)))
    if setting == "date":
        return formatdate(math.ceil(now + max(seconds, 1.0)), usegmt=True)
    if isinstance(setting, bool):
        return str(setting)
    if isinstance(setting, int | float):
        return str(int(setting)) if float(setting).is_integer() else repr(float(setting))
    return str(setting)


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request on a connection, None when the client closed it cleanly."""
    line = await reader.readline()
    while line in (b"\r\n", b"\n"):  # RFC 9112: ignore empty lines before a request-line
        line = await reader.readline()
    if not line:
        return None
    request = Request(arrived=time.time())
    if not line.endswith(b"\n"):
        request.error = 400  # the connection closed mid-line
        return request
    parts = line.decode("latin-1").rstrip("\r\n").split(" ")
    if (
        len(parts) != 3
        or not parts[0].isalpha()
        or not parts[0].isupper()
        or parts[2] not in ("HTTP/1.1", "HTTP/1.0")
        or not parts[1]
        or any(not 0x21 <= ord(c) <= 0x7E for c in parts[1])
    ):
        request.error = 400
    else:
        request.method, request.target, request.version = parts
    for _ in range(MAX_HEADERS + 1):
        line = await reader.readline()
        if line in (b"\r\n", b"\n"):
            break
        if not line.endswith(b"\n"):
            request.error = 400
            return request
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon or not name or name != name.strip() or name[0] in " \t":
            request.error = request.error or 400
            continue
        request.headers[name.lower()] = value.strip()
    else:
        request.error = 431
        return request
    if request.error:
        return request
    if "transfer-encoding" in request.headers:
        request.error = 501
        return request
    length_text = request.headers.get("content-length")
    if length_text is not None:
        if not length_text.isdigit():
            request.error = 400
        elif int(length_text) > MAX_BODY:
            request.error = 413
        elif int(length_text):
            await reader.readexactly(int(length_text))
    return request


class HostServer:
    """One simulated host: its listener, its limits' state and its page renderer."""

    def __init__(self, spec: HostSpec, farm: Farm) -> None:
        self.spec = spec
        self.farm = farm
        self.address = ""
        self.port = 0
        self.url = ""
        self.in_flight = 0
        self.robots_requests = 0
        self.connections = 0
        self._tokens = float(spec.burst)
        self._tokens_at = 0.0
        self._jitter_rng = random.Random(f"{spec.seed}/{spec.name}/jitter")
        self._error_rng = random.Random(f"{spec.seed}/{spec.name}/errors")
        self._hang_rng = random.Random(f"{spec.seed}/{spec.name}/hang")
        self._cache: dict[str, bytes] = {}
        self._redirects: dict[str, Redirect] = {}
        for redirect in spec.redirects:
            target = parse_target(redirect.source)
            if target is not None:
                self._redirects[target.path] = redirect
        self._query_pages = set(spec.query_page_indices())
        self._static_pages = spec.static_page_indices()
        self._hang_paths = self._normalized(spec.hang_paths)
        self._reset_paths = self._normalized(spec.reset_paths)
        self._server: asyncio.AbstractServer | None = None
        self._reserved: socket.socket | None = None
        # The limiters of the wild: a fixed window's count, the sliding window's and
        # the block's arrivals, the block's end, the queueing origin's workers.
        self._window_index = -1
        self._window_count = 0
        self._sliding: deque[float] = deque()
        self._hits: deque[float] = deque()
        self._blocked_until = 0.0
        self._busy_workers = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    @staticmethod
    def _normalized(paths: list[str]) -> set[str]:
        result: set[str] = set()
        for path in paths:
            target = parse_target(path)
            if target is not None:
                result.update({target.path, target.page_key})
        return result

    # -- listening

    async def bind(self, address: str) -> None:
        if self.spec.refused:
            # Bound but not listening: the kernel answers a SYN with RST (connection
            # refused), and no other process can take the port meanwhile.
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((address, self.spec.port))
            self._reserved = sock
            self.address, self.port = sock.getsockname()[:2]
        else:
            self._server = await asyncio.start_server(
                self._handle_connection,
                host=address,
                port=self.spec.port,
                backlog=1024,
                limit=MAX_LINE,
            )
            self.address, self.port = self._server.sockets[0].getsockname()[:2]
        if self.spec.hostname is not None:
            self._check_hostname(self.spec.hostname, self.address)
        host = self.spec.hostname or self.address
        self.url = f"http://{host}" if self.port == 80 else f"http://{host}:{self.port}"

    @staticmethod
    def _check_hostname(hostname: str, address: str) -> None:
        """Links must lead back to this loopback listener, never off the machine."""
        try:
            infos = socket.getaddrinfo(hostname, None, socket.AF_INET, socket.SOCK_STREAM)
        except OSError as error:
            raise SpecError(f"hostname {hostname!r} does not resolve: {error}") from None
        resolved = {str(info[4][0]) for info in infos}
        if resolved != {address}:
            raise SpecError(
                f"hostname {hostname!r} resolves to {', '.join(sorted(resolved))},"
                f" not only to the host's address {address}"
            )

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._reserved is not None:
            self._reserved.close()

    async def wait_closed(self) -> None:
        if self._server is not None:
            await self._server.wait_closed()

    # -- connections

    async def _handle_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.farm._tasks.add(task)
        self.connections += 1
        connection = self.connections
        loop = asyncio.get_running_loop()
        try:
            while True:
                # A connection idle or sending too slowly is closed, so none lingers.
                timer = loop.call_later(IDLE_TIMEOUT, writer.transport.abort)
                try:
                    request = await read_request(reader)
                except (ValueError, asyncio.LimitOverrunError):
                    request = Request(arrived=time.time(), error=431)
                finally:
                    timer.cancel()
                if request is None:
                    break
                if not await self._serve(request, reader, writer, connection):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        except asyncio.CancelledError:
            # The farm is closing. Ending normally, not cancelled: asyncio's stream
            # protocol asks the finished task for its exception, which a cancelled task
            # raises instead of returning.
            pass
        except Exception:  # a bug must show, not kill the farm
            traceback.print_exc(file=sys.stderr)
        finally:
            if task is not None:
                self.farm._tasks.discard(task)
            writer.close()

    async def _serve(
        self,
        request: Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection: int,
    ) -> bool:
        """Answer one request and log it; False when the connection must close."""
        self.farm.first_request_arrived()
        in_flight = self.in_flight + 1
        admitted = False
        target = parse_target(request.target) if request.error is None else None
        if request.error is not None or target is None:
            status = request.error or 400
            reply = Reply(status, "bad_request", b"bad request\n", "text/plain", close=True)
        else:
            reply_or_none = self._push_back(target)
            if reply_or_none is None:
                admitted = True
                self.in_flight += 1
                reply = self._route(request, target)
            else:
                reply = reply_or_none
            if self.spec.quota_headers is not None:
                reply.headers.extend(self._quota_fields())
        client_closed = False
        write_failed = False
        working = False  # holds one of a queueing origin's workers
        try:
            if admitted and self.spec.workers is not None:
                await self._take_worker()
                working = True
            if reply.delay > 0:
                await asyncio.sleep(reply.delay)
            client_closed = reader.at_eof() or writer.transport.is_closing()
            if reply.reset:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
            elif not writer.transport.is_closing():
                keep_alive = request.keep_alive and not reply.close
                writer.write(self._encode(request, reply, keep_alive))
                await writer.drain()
        except OSError:  # the client went away while the response was being written
            client_closed = write_failed = True
        finally:
            if working:
                self._give_back_worker()
            if admitted:
                self.in_flight -= 1
        self.farm.log.add(
            {
                "host": self.spec.name,
                "method": request.method,
                "path": request.target,
                "page": reply.page,
                "status": 0 if reply.reset else reply.status,
                "reason": reply.reason,
                "arrived": request.arrived,
                "finished": time.time(),
                "in_flight": in_flight,
                "retry_after": reply.retry_after,
                "bytes": len(reply.body),
                "connection": connection,
                "client_closed": client_closed,
                "user_agent": request.headers.get("user-agent"),
            }
        )
        return not (reply.reset or reply.close or write_failed) and request.keep_alive

    @staticmethod
    def _encode(request: Request, reply: Reply, keep_alive: bool) -> bytes:
        phrase = _PHRASES.get(reply.status, "")
        lines = [
            f"HTTP/1.1 {reply.status} {phrase}",
            f"Content-Type: {reply.content_type}",
            f"Content-Length: {len(reply.body)}",
            f"Date: {http_date(time.time())}",
            "Server: sitefarm",
        ]
        if reply.retry_after is not None:
            lines.append(f"Retry-After: {reply.retry_after}")
        lines.extend(f"{name}: {value}" for name, value in reply.headers)
        if not keep_alive:
            lines.append("Connection: close")
        elif request.version == "HTTP/1.0":
            lines.append("Connection: keep-alive")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if request.method == "HEAD" else head + reply.body

    # -- pushing back: pause, token bucket, capacity

    def _push_back(self, target: Target) -> Reply | None:
        spec = self.spec
        now = time.monotonic()
        wall = time.time()
        is_robots = target.path == "/robots.txt"
        if spec.pause_first and not is_robots:
            remaining = self.farm.started_monotonic + spec.pause_first - now
            if remaining > 0:
                value = retry_after_value(spec.pause_retry_after, remaining, wall)
                return Reply(429, "pause", b"paused\n", "text/plain", retry_after=value)
        if spec.outage_seconds and not is_robots:
            since = now - self.farm.started_monotonic - spec.outage_start
            if 0.0 <= since < spec.outage_seconds:
                value = retry_after_value(
                    spec.outage_retry_after, spec.outage_seconds - since, wall
                )
                return Reply(503, "outage", b"unavailable\n", "text/plain", retry_after=value)
        limiter = self._limiters(now, wall)
        if limiter is not None:
            return limiter
        if spec.rate is not None:
            since = now - max(self._tokens_at, self.farm.started_monotonic)
            self._tokens = min(float(spec.burst), self._tokens + since * spec.rate)
            self._tokens_at = now
            if self._tokens < 1.0:
                wait = (1.0 - self._tokens) / spec.rate
                value = retry_after_value(spec.rate_retry_after, wait, wall)
                return Reply(429, "rate", b"too many requests\n", "text/plain", retry_after=value)
            self._tokens -= 1.0
        if spec.capacity is not None and self.in_flight >= spec.capacity:
            value = retry_after_value(spec.capacity_retry_after, spec.latency, wall)
            return Reply(503, "capacity", b"overloaded\n", "text/plain", retry_after=value)
        return None

    def _limiters(self, now: float, wall: float) -> Reply | None:
        """The block, the sliding window and the fixed window, in that order."""
        spec = self.spec
        if spec.block_limit is not None:
            if now < self._blocked_until:
                self._blocked_until = now + spec.block_seconds  # every hit renews it
                return Reply(403, "block", b"forbidden\n", "text/plain")
            self._hits.append(now)
            while self._hits and self._hits[0] <= now - spec.block_interval:
                self._hits.popleft()
            if len(self._hits) > spec.block_limit:
                self._hits.clear()
                self._blocked_until = now + spec.block_seconds
                return Reply(403, "block", b"forbidden\n", "text/plain")
        if spec.sliding_limit is not None:
            self._sliding.append(now)  # counted whether it passes or not
            while self._sliding and self._sliding[0] <= now - spec.sliding_seconds:
                self._sliding.popleft()
            if len(self._sliding) > spec.sliding_limit:
                wait = self._sliding[-spec.sliding_limit - 1] + spec.sliding_seconds - now
                value = retry_after_value(spec.sliding_retry_after, wait, wall)
                return Reply(
                    spec.sliding_status, "sliding", b"denied\n", "text/plain", retry_after=value
                )
        if spec.window_limit is not None:
            self._roll_window(now)
            if self._window_count >= spec.window_limit:
                value = retry_after_value(spec.window_retry_after, self._to_edge(now), wall)
                return Reply(429, "window", b"quota exceeded\n", "text/plain", retry_after=value)
            self._window_count += 1
        return None

    def _roll_window(self, now: float) -> None:
        index = math.floor((now - self.farm.started_monotonic) / self.spec.window_seconds)
        if index != self._window_index:
            self._window_index = index
            self._window_count = 0

    def _to_edge(self, now: float) -> float:
        """Seconds from ``now`` to the end of the current fixed window."""
        edge = self.farm.started_monotonic + (self._window_index + 1) * self.spec.window_seconds
        return max(0.0, edge - now)

    def _quota_fields(self) -> list[tuple[str, str]]:
        """The fixed window's quota as it stands after this request."""
        spec = self.spec
        assert spec.window_limit is not None
        now = time.monotonic()
        self._roll_window(now)
        limit = spec.window_limit
        remaining = max(0, limit - self._window_count)
        to_edge = self._to_edge(now)
        if spec.quota_headers == "github":
            return [
                ("X-RateLimit-Limit", str(limit)),
                ("X-RateLimit-Remaining", str(remaining)),
                ("X-RateLimit-Used", str(limit - remaining)),
                ("X-RateLimit-Reset", str(math.ceil(time.time() + to_edge))),
            ]
        window = f"{spec.window_seconds:g}"
        reset = max(1, math.ceil(to_edge))
        return [
            ("RateLimit-Policy", f'"window";q={limit};w={window}'),
            ("RateLimit", f'"window";r={remaining};t={reset}'),
        ]

    async def _take_worker(self) -> None:
        """Wait, first come first served, for one of the queueing origin's workers."""
        assert self.spec.workers is not None
        if self._busy_workers < self.spec.workers and not self._waiting:
            self._busy_workers += 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._give_back_worker()  # handed over as the wait was cancelled
            raise

    def _give_back_worker(self) -> None:
        """The worker goes to the next in the queue, or back to the pool."""
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._busy_workers -= 1

    # -- routing an admitted request

    def _latency(self) -> float:
        spec = self.spec
        delay = spec.latency
        if spec.jitter:
            delay += self._jitter_rng.uniform(0.0, spec.jitter)
        if spec.soft_capacity is not None and self.in_flight > spec.soft_capacity:
            delay *= self.in_flight / spec.soft_capacity
        return delay

    def _route(self, request: Request, target: Target) -> Reply:
        if request.method not in ("GET", "HEAD"):
            return Reply(
                405, "method", b"method not allowed\n", "text/plain", [("Allow", "GET, HEAD")]
            )
        spec = self.spec
        delay = self._latency()
        fast = delay if spec.fast_latency is None else spec.fast_latency
        if target.path in self._reset_paths or target.page_key in self._reset_paths:
            return Reply(0, "reset", reset=True)
        if target.path == "/robots.txt" or (
            spec.robots_mode == "redirect" and target.path.startswith("/robots/")
        ):
            reply = self._robots(target)
            reply.delay += fast + spec.robots_delay
            return reply
        if target.path == "/sitemap.xml" and not target.query:
            if not spec.sitemap:
                return Reply(404, "not_found", b"not found\n", "text/plain", delay=fast)
            return Reply(200, "sitemap", self._sitemap(), "application/xml", page=None, delay=fast)
        redirect = self._redirects.get(target.path)
        if redirect is not None:
            location = self.farm.resolve_location(self, redirect.target)
            return Reply(
                redirect.status,
                "redirect",
                f'<a href="{location}">moved</a>\n'.encode(),
                headers=[("Location", location)],
                delay=fast,
            )
        page = target.page_key
        body = self._page_body(page)
        if body is None:
            return Reply(404, "not_found", b"not found\n", "text/plain", delay=fast)
        if self._static_pages and self._page_index(page) in self._static_pages:
            delay = fast
        if (
            target.path in self._hang_paths
            or page in self._hang_paths
            or (spec.hang_rate and self._hang_rng.random() < spec.hang_rate)
        ):
            return Reply(200, "hang", body, page=page, delay=delay + spec.hang_seconds)
        if spec.error_rate and self._error_rng.random() < spec.error_rate:
            return Reply(500, "error", b"internal error\n", "text/plain", page=page, delay=delay)
        return Reply(200, "page", body, page=page, delay=delay)

    # -- robots.txt

    def robots_body(self) -> str:
        spec = self.spec
        body = spec.robots or ""
        if spec.crawl_delay is not None:
            delay = f"Crawl-delay: {spec.crawl_delay:g}"
            lines = body.splitlines()
            for index, line in enumerate(lines):
                key, _, value = line.split("#", 1)[0].partition(":")
                if key.strip().lower() == "user-agent" and value.strip() == "*":
                    lines.insert(index + 1, delay)
                    body = "\n".join(lines) + "\n"
                    break
            else:
                body = f"User-agent: *\n{delay}\n" + ("\n" + body if body else "")
        if spec.sitemap:
            body = (
                body.rstrip("\n") + "\n\n" if body else ""
            ) + f"Sitemap: {self.url}/sitemap.xml\n"
        return body

    def _robots(self, target: Target) -> Reply:
        spec = self.spec
        mode = spec.robots_mode
        text = "text/plain"
        if target.path == "/robots.txt":
            self.robots_requests += 1
        if mode == "404":
            return Reply(404, "robots", b"not found\n", text)
        if mode == "503" or (
            mode == "503_then_200" and self.robots_requests <= spec.robots_fail_first
        ):
            return Reply(503, "robots", b"unavailable\n", text)
        if mode == "429":
            return Reply(429, "robots", b"too many requests\n", text)
        if mode == "redirect":
            hops = spec.robots_redirect_hops
            step = 0 if target.path == "/robots.txt" else -1
            if target.path.startswith("/robots/hop/"):
                number = target.path.rsplit("/", 1)[1]
                step = int(number) if number.isdigit() else -1
            if target.path == "/robots/real.txt":
                return Reply(200, "robots", self.robots_body().encode(), text)
            if step < 0 or step >= max(hops, 1):
                return Reply(404, "not_found", b"not found\n", text)
            if hops == 0:
                return Reply(200, "robots", self.robots_body().encode(), text)
            location = (
                f"{self.url}/robots/real.txt"
                if step + 1 >= hops
                else (f"{self.url}/robots/hop/{step + 1}")
            )
            return Reply(301, "robots", b"moved\n", text, [("Location", location)])
        body = self.robots_body()
        if mode == "normal" and not body and spec.robots is None:
            return Reply(404, "robots", b"not found\n", text)
        data = body.encode()
        if mode == "huge":
            data = self._huge_robots(body)
        elif mode == "garbage":
            data = self._garbage_robots(body)
        return Reply(200, "robots", data, text)

    def _huge_robots(self, body: str) -> bytes:
        cached = self._cache.get("\0huge")
        if cached is not None:
            return cached
        head = (body or "User-agent: *\nAllow: /\n").encode()
        if not head.endswith(b"\n"):
            head += b"\n"
        tail = self.spec.robots_tail.encode()
        filler_line = b"# " + b"padding " * 8 + b"\n"
        room = max(0, self.spec.robots_size - len(head) - len(tail))
        filler = filler_line * (room // len(filler_line))
        filler += b"#" * (room - len(filler) - 1) + b"\n" if room > len(filler) else b""
        data = head + filler + tail
        self._cache["\0huge"] = data
        return data

    def _garbage_robots(self, body: str) -> bytes:
        cached = self._cache.get("\0garbage")
        if cached is not None:
            return cached
        rng = random.Random(f"{self.spec.seed}/{self.spec.name}/garbage")
        forbidden = {ord("\n"), ord("\r")}
        alphabet = [b for b in range(256) if b not in forbidden]

        def junk() -> bytes:
            kind = rng.randrange(4)
            if kind == 0:
                return bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 80)))
            if kind == 1:
                words = ["zork", "qux", "!!", "<html>", "%%", "::", "\x00", "\u00e9t\u00e9"]
                return " ".join(rng.choice(words) for _ in range(rng.randrange(1, 8))).encode()
            if kind == 2:
                return b"x" * rng.randrange(1000, 20000)
            return f"Unknown-directive-{rng.randrange(99)}: {rng.random()}".encode()

        out = [junk()]
        for line in (body or "User-agent: *\nAllow: /\n").splitlines():
            out.extend(junk() for _ in range(rng.randrange(1, 4)))
            out.append(line.encode())
        out.append(junk())
        data = b"\n".join(out) + b"\n"
        self._cache["\0garbage"] = data
        return data

    # -- pages

    @staticmethod
    def _page_index(page: str) -> int | None:
        """The i of a rendered page "/p/i" or "/p/i?query"; None for the root."""
        number = page[3:].partition("?")[0] if page.startswith("/p/") else ""
        return int(number) if number.isdigit() else None

    def _page_body(self, page: str) -> bytes | None:
        cached = self._cache.get(page)
        if cached is not None:
            return cached
        body = self._render(page)
        if body is not None:
            self._cache[page] = body
        return body

    def _render(self, page: str) -> bytes | None:
        spec = self.spec
        query = "&".join(f"{k}={v}" for k, v in QUERY_VARIANT)
        if page == "/":
            title = f"{spec.name}: home"
            hrefs = self._root_links()
        elif page.startswith("/p/"):
            number, _, page_query = page[3:].partition("?")
            if not number.isdigit() or (number != "0" and number.startswith("0")):
                return None
            index = int(number)
            if index >= spec.pages:
                return None
            if page_query and (page_query != query or index not in self._query_pages):
                return None
            title = f"{spec.name}: page {index}" + (" (en, full)" if page_query else "")
            hrefs = self._page_links(index, bool(page_query))
        else:
            return None
        items = "".join(f'<li><a href="{escape(href)}">{escape(href)}</a></li>' for href in hrefs)
        html = (
            f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{title}</title></head>'
            f"<body><h1>{title}</h1><ul>{items}</ul>"
        )
        if len(html) < spec.page_bytes:
            filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
            html += "<p>" + filler * ((spec.page_bytes - len(html)) // len(filler) + 1) + "</p>"
        return (html + "</body></html>\n").encode()

    def _root_links(self) -> list[str]:
        spec = self.spec
        step = max(1, spec.pages // 10)
        hrefs = [f"/p/{i}" for i in range(0, spec.pages, step)]
        hrefs += [r.source for r in spec.redirects]
        hrefs += [f"/missing/{i}" for i in range(spec.broken_links)]
        hrefs += [self.farm.hosts[name].url + "/" for name in spec.cross_links]
        return hrefs

    def _page_links(self, index: int, is_variant: bool) -> list[str]:
        spec = self.spec
        rng = random.Random(f"{spec.seed}/{spec.name}/links/{index}")
        targets = [j for j in (index + 1, index + 2) if j < spec.pages]
        wanted = min(spec.links_per_page, spec.pages - 1)
        attempts = 0
        while len(targets) < wanted and attempts < 20 * wanted:
            attempts += 1
            candidate = rng.randrange(spec.pages)
            if candidate != index and candidate not in targets:
                targets.append(candidate)
        links: list[tuple[int, tuple[tuple[str, str], ...]]] = [(j, ()) for j in targets]
        if index in self._query_pages:
            links.append((index, () if is_variant else QUERY_VARIANT))
        if spec.tracking_links and links:
            links.append(links[0])  # the same page twice, spelled differently
        hrefs = []
        for number, (target, query) in enumerate(links):
            path = f"/p/{target}"
            if not spec.tracking_links or (number < len(links) - 1 and rng.random() < 0.4):
                kind = "plain"
            elif query:
                kind = rng.choice(("query_order", "query_order", "utm", "empty_pairs"))
            else:
                kind = rng.choice(VARIANT_KINDS)
            hrefs.append(link_variant(self.url, path, query, kind, rng.randrange(1 << 30)))
        for name in spec.cross_links:
            other = self.farm.hosts[name]
            path = f"/p/{(index * 7 + spec.seed) % other.spec.pages}" if other.spec.pages else "/"
            kind = "utm" if spec.tracking_links and index % 2 else "plain"
            href = link_variant(other.url, path, (), kind, index)
            hrefs.append(href if href.startswith("http") else other.url + href)
        return hrefs

    def _sitemap(self) -> bytes:
        cached = self._cache.get("\0sitemap")
        if cached is not None:
            return cached
        entries = "".join(
            f"<url><loc>{self.url}{page.replace('&', '&amp;')}</loc></url>"
            for page in self.spec.page_ids()
        )
        data = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"{entries}</urlset>\n"
        ).encode()
        self._cache["\0sitemap"] = data
        return data


class Farm:
    """All hosts in one event loop. ``async with Farm(specs) as farm:`` in-process; the
    subprocess runner (``start_farm``) wraps the same class so the crawler's loop and
    timing are not disturbed."""

    def __init__(
        self,
        specs: list[HostSpec],
        log_path: str | Path | None = None,
        *,
        keep_records: bool = True,
        clock: str = "start",
    ) -> None:
        validate_farm(specs)
        if clock not in CLOCKS:
            raise SpecError(f"clock {clock!r} is not one of {', '.join(CLOCKS)}")
        self.clock = clock
        self.specs = list(specs)
        self.hosts: dict[str, HostServer] = {spec.name: HostServer(spec, self) for spec in specs}
        self.log = RequestLog(log_path, keep_records)
        self.started = 0.0
        self.started_monotonic = 0.0
        self._clock_started = False
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def urls(self) -> dict[str, str]:
        return {name: host.url for name, host in self.hosts.items()}

    @property
    def records(self) -> list[dict[str, Any]]:
        return list(self.log.records or [])

    def resolve_location(self, host: HostServer, target: str) -> str:
        if target.startswith("@"):
            name, _, path = target[1:].partition("/")
            return self.hosts[name].url + "/" + path
        if target.startswith("/"):
            return host.url + target
        return target

    def first_request_arrived(self) -> None:
        """With the "first_request" clock, pauses, outages and buckets start now."""
        if self.clock == "first_request" and not self._clock_started:
            self._clock_started = True
            self.started_monotonic = time.monotonic()

    async def start(self) -> None:
        """Bind every host; the clock of pauses, outages and token buckets starts here
        (or at the first request, see ``CLOCKS``)."""
        self.started = time.time()
        self.started_monotonic = time.monotonic()
        self._clock_started = self.clock == "start"
        taken = {ipaddress.ip_address(s.address) for s in self.specs if s.address is not None}
        next_address = FIRST_AUTO_ADDRESS
        try:
            for spec in self.specs:
                address = spec.address
                if address is None:
                    while next_address in taken:
                        next_address += 1
                    address = str(next_address)
                    next_address += 1
                await self.hosts[spec.name].bind(address)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop listening, cut every connection, flush the log. Bounded in time."""
        for host in self.hosts.values():
            host.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        for host in self.hosts.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(host.wait_closed(), 5.0)
        self.log.close()

    async def __aenter__(self) -> Farm:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
