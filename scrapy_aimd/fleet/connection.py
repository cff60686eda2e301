"""One worker's connection to the fleet's Redis: its scripts, its clock, its errors.

Every call is one Lua script, so one round trip (``round_trips`` counts them,
including a script loaded again after Redis lost its script cache). Redis's
clock is the fleet's clock: every reply carries the server's time, and
:meth:`Fleet.now` goes on from the latest one with the local monotonic clock,
counted from when its call was sent (so never behind the server's), so that
times stored by one worker mean the same to another whose clock is off.

A call that fails on the network is not retried (a claim that ran twice would
lease two requests): it raises :class:`FleetConnectionLost`, and the scheduler
stops cleanly. No Scrapy import.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any, Final

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from scrapy_aimd.fleet.errors import FleetConnectionLost, FleetStoreError
from scrapy_aimd.settings import FLEET_HEARTBEAT, FLEET_REPLY_TIMEOUT, masked_url

__all__ = [
    "BULK",
    "DEFAULT_BUCKETS",
    "FORMAT",
    "Encoded",
    "Fleet",
    "FleetCounters",
    "clear_fleet",
    "masked_url",
    "pack_evalsha",
]

#: The layout of the keys; a fleet of another format is refused (2: host states
#: pickled, and answers carried by claims).
FORMAT: Final = 2
#: Seen-set buckets: 2**15. At Redis's default ``set-max-intset-entries`` (512)
#: the set stays in intsets up to about 15 M URLs (see docs/fleet.rst, sizing).
DEFAULT_BUCKETS: Final = 1 << 15
#: Seconds to wait for a connection, and for a reply.
CONNECT_TIMEOUT: Final = 2.0
REPLY_TIMEOUT: Final = FLEET_REPLY_TIMEOUT
#: Seconds a worker's heartbeat key lives unless renewed (every third of it, and
#: by each claim): a worker silent this long is taken for dead, and its leases
#: go back to the queues at once (see docs/fleet.rst, "A worker that dies").
#: ``AIMD_FLEET_HEARTBEAT``'s default; it must stay above ``REPLY_TIMEOUT``, or a
#: Redis that stalls that long (a BGSAVE fork) expires every worker's together.
HEARTBEAT: Final = FLEET_HEARTBEAT
_SCRIPTS: Final = (
    "init",
    "push",
    "claim",
    "hold",
    "done",
    "renew",
    "status",
    "state",
    "robots",
    "robots_put",
    "giveup",
    "heartbeat",
)
_KEY_ERROR: Final = "AIMDKEY "


def _load_scripts() -> dict[str, str]:
    folder = resources.files("scrapy_aimd.fleet") / "lua"
    common = (folder / "common.lua").read_text(encoding="utf-8")
    return {
        name: common + (folder / f"{name}.lua").read_text(encoding="utf-8") for name in _SCRIPTS
    }


@dataclass
class FleetCounters:
    """What one worker did with Redis, for ``aimd/fleet/*`` stats."""

    round_trips: int = 0
    claims: int = 0
    claim_misses: int = 0
    pushed: int = 0
    duplicates: int = 0
    feedbacks: int = 0
    conflicts: int = 0
    reaped: int = 0
    renewed: int = 0
    late_feedback: int = 0
    undecodable: int = 0

    def as_stats(self) -> dict[str, int]:
        """The counters under their stats names, ``aimd/fleet/<name>``."""
        return {f"aimd/fleet/{name}": value for name, value in asdict(self).items()}


class Fleet:
    """The fleet's Redis under ``prefix``: connects, checks the meta key, runs scripts."""

    def __init__(
        self,
        url: str,
        prefix: str,
        *,
        rules_id: str = "",
        buckets: int = DEFAULT_BUCKETS,
        reply_timeout: float = REPLY_TIMEOUT,
        heartbeat: float = HEARTBEAT,
    ) -> None:
        if buckets < 1 or buckets & (buckets - 1) or buckets > 1 << 24:
            raise ValueError(f"buckets={buckets!r}: expected a power of 2 up to 2**24")
        if not prefix or any(c.isspace() for c in prefix):
            raise ValueError(f"AIMD_FLEET_KEY={prefix!r}: expected a non-empty key prefix")
        self.url = url
        self.prefix = prefix
        self.counters = FleetCounters()
        #: This worker's id in the fleet's locks (the robots.txt fetches).
        self.token = secrets.token_hex(8)
        #: This worker's heartbeat, in milliseconds as the scripts take it.
        self.heartbeat_ms = max(1, round(heartbeat * 1000))
        self._scripts = _load_scripts()
        self._shas: dict[str, str] = {}
        self._server_time = 0.0
        self._local_time = self._call_sent = time.monotonic()
        #: The connection the scripts go through (see ``_evalsha``).
        self._connection: Any = None
        try:
            self.redis = redis.Redis.from_url(
                url,
                socket_connect_timeout=CONNECT_TIMEOUT,
                socket_timeout=reply_timeout,
                retry=Retry(backoff=NoBackoff(), retries=0),
                health_check_interval=0,
                # RESP2: the scripts' replies are the same, and its parser costs
                # about a fifth less CPU per reply than RESP3's.
                protocol=2,
            )
        except ValueError as exc:
            raise FleetStoreError(
                f"AIMD_REDIS_URL={masked_url(url)!r} is not valid: {exc}"
            ) from exc
        try:
            self.redis.ping()
        except redis.RedisError as exc:
            self.redis.close()
            raise FleetStoreError(
                f"Cannot reach Redis at AIMD_REDIS_URL={masked_url(url)!r}: {exc}"
            ) from exc
        self._load_all()
        try:
            reply = self.call("init", FORMAT, buckets, rules_id)
        except FleetStoreError as exc:
            if "other fingerprint rules" not in str(exc):
                raise
            try:
                stored = self.redis.hget(self.key("meta"), "rules")
            except redis.RedisError:
                raise exc from None
            raise FleetStoreError(
                _other_rules(self.key("meta"), stored, rules_id, self.prefix)
            ) from None
        self.saw_time(reply[0])
        #: Seen-set buckets: the fleet's own, set by the worker that created it.
        self.buckets = int(reply[1])
        self.intset_entries = self._intset_entries()

    def _load_all(self) -> None:
        """Load every script in one round trip, so that each call is one."""
        try:
            pipe = self.redis.pipeline(transaction=False)
            for name in _SCRIPTS:
                pipe.script_load(self._scripts[name])
            self.counters.round_trips += 1
            self._shas = dict(zip(_SCRIPTS, pipe.execute(), strict=True))
        except redis.RedisError as exc:
            self.redis.close()
            raise FleetStoreError(
                f"Redis at AIMD_REDIS_URL={masked_url(self.url)!r} refused the fleet's "
                f"scripts: {exc}"
            ) from exc

    def _intset_entries(self) -> int | None:
        """The server's ``set-max-intset-entries``, None where CONFIG is not allowed."""
        try:
            reply = self.redis.config_get("set-max-intset-entries")
            self.counters.round_trips += 1
        except redis.RedisError:
            return None
        values: dict[Any, Any] = dict(reply)
        value = values.get(b"set-max-intset-entries", values.get("set-max-intset-entries"))
        return int(value) if value is not None else None

    def beat(self, *, alive: bool = True) -> bool:
        """This worker is alive (one round trip); ``alive=False``: it closes, and
        its heartbeat ends with it (every lease it still holds given back first).
        True if another worker's claim took it for dead since its last beat (its
        reactor was blocked past the heartbeat) and took its leases back."""
        return bool(self.call("heartbeat", self.token, self.heartbeat_ms, "1" if alive else "0"))

    def key(self, suffix: str) -> str:
        return f"{self.prefix}:{suffix}"

    def now(self) -> float:
        """Redis's clock: the latest reply's server time, moved on by the local
        clock since its call was sent. The script read the time after that, so
        this is never behind the server's clock (ahead by at most a round trip):
        a send timed by it starts the host's gap for every worker no earlier
        than the send itself, over however slow a link."""
        return self._server_time + (time.monotonic() - self._local_time)

    def saw_time(self, server_time: bytes | str | float) -> float:
        """Set the clock from the latest call's reply (not an earlier call's: the
        time is anchored at the latest send); returns the server time."""
        value = float(server_time)
        self._server_time, self._local_time = value, self._call_sent
        return value

    def call(self, script: str, *args: Any, what: str | Callable[[], str] = "") -> Any:
        """Run a fleet script: one round trip (two if Redis lost the script).
        ``what``: what the call does, for errors (default: the script's name), or
        a function that tells it (only an error calls it)."""
        source = self._scripts[script]
        arguments = (self.prefix, *args)
        try:
            sha = self._shas.get(script)
            if sha is not None:
                self.counters.round_trips += 1
                try:
                    return self._evalsha(sha, arguments)
                except redis.exceptions.NoScriptError:
                    pass
            self.counters.round_trips += 1
            self._shas[script] = self.redis.script_load(source)
            self.counters.round_trips += 1
            return self._evalsha(self._shas[script], arguments)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise FleetConnectionLost(
                f"Lost the connection to Redis at AIMD_REDIS_URL={masked_url(self.url)!r} "
                f"({_what(script, what)}): {exc}"
            ) from exc
        except redis.ResponseError as exc:
            message = _SCRIPT_PLACE.sub("", str(exc))  # the script's sha and line: no help
            if message.startswith(_KEY_ERROR):
                raise FleetStoreError(
                    f"Redis key {message[len(_KEY_ERROR) :]} "
                    f"(AIMD_FLEET_KEY={self.prefix!r}); not touched"
                ) from exc
            raise FleetStoreError(
                f"Redis refused the fleet's {script} script ({_what(script, what)}): {exc}"
            ) from exc
        except redis.RedisError as exc:
            raise FleetStoreError(
                f"Redis failed in the fleet's {script} script ({_what(script, what)}): {exc}"
            ) from exc

    def _evalsha(self, sha: str, arguments: tuple[Any, ...]) -> Any:
        """EVALSHA on a connection of the client's own pool, held by this fleet:
        the client's per-command path (pool, retry and lock bookkeeping) costs
        about as much CPU as the round trip itself, twice per request. Errors
        are redis-py's, as from the client; a connection that failed is dropped
        (the next call connects again)."""
        connection = self._connection
        if connection is None:
            connection = self._connection = self.redis.connection_pool.get_connection()
        try:
            packed = pack_evalsha(sha, arguments)
            self._call_sent = time.monotonic()
            connection.send_packed_command([packed], check_health=False)
            return connection.read_response()
        except (redis.ConnectionError, redis.TimeoutError):
            connection.disconnect()
            raise

    def clear(self) -> int:
        """Delete every key under the prefix (see :func:`clear_fleet`)."""
        return _clear(self.redis, self.prefix)

    def close(self) -> None:
        if self._connection is not None:
            self.redis.connection_pool.release(self._connection)
            self._connection = None
        self.redis.close()


class Encoded:
    """Arguments already in the Redis protocol (``$<length>\\r\\n<value>\\r\\n``
    each, :data:`BULK`), that :func:`pack_evalsha` takes as they are:
    a request pushed or an answer carried formats its values with one ``%``
    instead of one each."""

    __slots__ = ("count", "data")

    def __init__(self, data: bytes, count: int) -> None:
        self.data, self.count = data, count


#: The protocol's frame of one value, bytes: ``BULK % (len(value), value)``.
BULK: Final = b"$%d\r\n%b\r\n"


def _what(script: str, what: str | Callable[[], str]) -> str:
    """What a call did, for its error (see :meth:`Fleet.call`)."""
    told = what() if callable(what) else what
    return told or script


def pack_evalsha(sha: str, arguments: tuple[Any, ...]) -> bytes:
    """``EVALSHA sha 0 *arguments`` in the Redis protocol, as redis-py packs it
    (str as UTF-8, int and float by their repr) at a tenth of its CPU: a claim
    that carries answers and pushes has some 80 arguments, a push 7 per request.
    One ``%`` and one append per argument (an :class:`Encoded` is appended as it
    is), then one join."""
    parts = [b""]
    append = parts.append
    count = len(arguments) + 3
    for argument in arguments:
        kind = type(argument)  # the exact types first: most arguments are
        if kind is str:
            data = argument.encode()
        elif kind is bytes:
            data = argument
        elif kind is Encoded:
            append(argument.data)
            count += argument.count - 1
            continue
        elif kind is int or kind is float:
            data = repr(argument).encode()
        else:
            data = _encode_other(argument)
        append(BULK % (len(data), data))
    parts[0] = b"*%d\r\n$7\r\nEVALSHA\r\n$%d\r\n%s\r\n$1\r\n0\r\n" % (
        count,
        len(sha),
        sha.encode("ascii"),
    )
    return b"".join(parts)


def _encode_other(argument: Any) -> bytes:
    """A subclass of bytes, str, int or float, as redis-py would send it (not bool)."""
    if isinstance(argument, bytes):
        return bytes(argument)
    if isinstance(argument, str):
        return str(argument).encode("utf-8")
    if isinstance(argument, (int, float)) and not isinstance(argument, bool):
        return repr(argument).encode("ascii")
    raise redis.DataError(f"cannot send {type(argument).__name__} to Redis")


#: Where Redis says a script failed: " script: <sha>, on @user_script:8."
_SCRIPT_PLACE: Final = re.compile(r"\s*script: [0-9a-f]+, on @user_script:\d+\.?\s*$")


def _other_rules(meta: str, stored: bytes | str | None, ours: str, prefix: str) -> str:
    """The refusal of a fleet made under other URL rules, by the parts of the
    rules ids that differ (each id is ``;``-separated, some parts long)."""
    if isinstance(stored, bytes):
        stored = stored.decode("utf-8", "replace")
    theirs = (stored or "").split(";")
    mine = ours.split(";")
    there = "; ".join(part for part in theirs if part not in mine) or "none"
    here = "; ".join(part for part in mine if part not in theirs) or "none"
    return (
        f"Redis key {meta} was made under other fingerprint rules ({there[:200]} there; "
        f"{here[:200]} here): the URL settings (AIMD_CANONICAL_*, AIMD_STRIP_PARAMS, "
        f"AIMD_KEEP_PARAMS) must be the same for every crawl of a fleet. Reset it "
        f"(scrapy_aimd.fleet.clear_fleet, see docs/fleet.rst) or give this crawl another "
        f"AIMD_FLEET_KEY than {prefix!r}"
    )


def clear_fleet(url: str, prefix: str) -> int:
    """Delete every key of the fleet under ``prefix`` (``AIMD_FLEET_KEY``): an
    operator's reset, never done by a worker that closes (others may still be
    crawling), and made without a :class:`Fleet`, whose check of the meta key
    refuses a fleet made under other rules. Returns how many keys went."""
    client = redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT)
    try:
        return _clear(client, prefix)
    finally:
        client.close()


#: The fleet's own keys after ``P:`` (docs/fleet.rst, *The keys*): these names...
_OWN_NAMES: Final = frozenset(
    (
        b"meta",
        b"hosts",
        b"leases",
        b"n",
        b"arrival",
        b"seen_n",
        b"reaped",
        b"idle_since",
        b"gaveup",
        b"workers",
    )
)
#: ... or these kinds, then ``:`` and a host, lease, bucket, origin or worker.
_OWN_KINDS: Final = frozenset((b"q", b"h", b"e", b"l", b"s", b"r", b"rl", b"hb", b"wl", b"dead"))
#: A fleet's meta key's ``kind`` (init.lua).
_KIND: Final = b"scrapy-aimd-fleet"
#: Characters that SCAN's pattern reads as a glob.
_GLOB: Final = re.compile(r"([*?\[\]\\])")


def fleet_key(prefix: str, key: bytes) -> bool:
    """Whether ``key`` is one of the fleet's under ``prefix``: not a key of another
    fleet whose prefix continues this one (``aimd:books:2026-12`` after
    ``aimd:books``), nor any other key that merely starts with ``prefix:``."""
    start = prefix.encode() + b":"
    if not key.startswith(start):
        return False
    rest = key[len(start) :]
    kind, colon, _ = rest.partition(b":")
    return kind in _OWN_KINDS if colon else rest in _OWN_NAMES


def _clear(client: redis.Redis, prefix: str) -> int:
    deleted = 0
    pattern = _GLOB.sub(r"\\\1", prefix) + ":*"
    try:
        keys = [k for k in client.scan_iter(match=pattern, count=1000) if fleet_key(prefix, k)]
        nested = _nested_fleets(client, prefix, keys)
        keys = [k for k in keys if not any(fleet_key(other, k) for other in nested)]
        for batch in _batches(keys, 500):
            deleted += int(client.unlink(*batch))
    except redis.RedisError as exc:
        raise FleetStoreError(f"Cannot clear {prefix}:*: {exc}") from exc
    return deleted


def _nested_fleets(client: redis.Redis, prefix: str, keys: list[bytes]) -> list[str]:
    """The prefixes of other fleets that continue this one with a name that is
    also one of its key kinds (``t:q`` after ``t``: their keys read as queues of
    hosts): found by their meta keys."""
    own_meta = prefix.encode() + b":meta"
    candidates = [k for k in keys if k.endswith(b":meta") and k != own_meta]
    if not candidates:
        return []
    pipe = client.pipeline(transaction=False)
    for key in candidates:
        pipe.type(key)
    kinds = pipe.execute()
    pipe = client.pipeline(transaction=False)
    hashes = [k for k, kind in zip(candidates, kinds, strict=True) if kind == b"hash"]
    for key in hashes:
        pipe.hget(key, "kind")
    found = pipe.execute()
    return [
        k[: -len(b":meta")].decode() for k, kind in zip(hashes, found, strict=True) if kind == _KIND
    ]


def _batches(items: Any, size: int) -> Any:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
