"""A slow network link to a real server: a TCP relay on a free 127.0.0.1 port
that holds each chunk of bytes for a set time in each direction, as a Redis
across a continent would, and can hold a connection's first bytes longer, as
a TLS handshake does on the way to a distant site. Real sockets both ways;
only the wire is slowed.

    with SlowLink(("127.0.0.1", redis_port), back=0.05) as link:
        redis.Redis(port=link.port)   # every reply comes 50 ms after it was sent
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from types import TracebackType

from redis_server import free_port


class SlowLink:
    """Relays ``127.0.0.1:port`` to ``target``; ``there`` and ``back``: seconds each
    chunk spends on the way to the target and on the way back; ``handshake``:
    seconds more for the first chunk of each connection on its way there (a
    client writes its request only once the handshake is over, so the server
    sees it that much after the connect). A chunk keeps its order; the delays
    are latencies, not a bandwidth limit."""

    def __init__(
        self,
        target: tuple[str, int],
        *,
        there: float = 0.0,
        back: float = 0.0,
        handshake: float = 0.0,
    ) -> None:
        self.target, self.there, self.back, self.handshake = target, there, back, handshake
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> SlowLink:
        self._spawn(self._accept)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._closing.set()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(5)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, server]
            self._relay(client, server, self.there, first=self.handshake)
            self._relay(server, client, self.back)

    def _relay(
        self, source: socket.socket, sink: socket.socket, delay: float, first: float = 0.0
    ) -> None:
        """One direction: a reader stamps each chunk, a writer sends it when due."""
        chunks: queue.Queue[tuple[float, bytes]] = queue.Queue()

        def read() -> None:
            extra = first
            while True:
                try:
                    data = source.recv(65536)
                except OSError:
                    data = b""
                chunks.put((time.monotonic() + delay + extra, data))
                extra = 0.0
                if not data:
                    return

        def write() -> None:
            while True:
                due, data = chunks.get()
                time.sleep(max(0.0, due - time.monotonic()))
                if not data:
                    with contextlib.suppress(OSError):
                        sink.shutdown(socket.SHUT_WR)
                    return
                try:
                    sink.sendall(data)
                except OSError:
                    return

        self._spawn(read)
        self._spawn(write)
