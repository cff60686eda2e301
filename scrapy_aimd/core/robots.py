"""robots.txt by RFC 9309: what each fetch outcome means, per origin, and for how long.

Pure: no Scrapy, the clock is an argument. The Scrapy side
(``scrapy_aimd.robots_middleware``) fetches the files and asks ``RobotsBook``
what to do; the JOBDIR keeps what the book knows through ``snapshot`` and
``restore``, and nothing else of it.

RFC 9309 §2.3.1: a 2xx gives the rules; a 4xx (other than 429) means there are
none, so everything is allowed; a 5xx, a 429 or a network failure means the
file is unreachable, and the crawler must not assume it may crawl: the origin's
requests wait while the file is fetched again with backoff, and once the
retries are spent they are skipped. Only the first 500 KiB are parsed (§2.5).
Rules are kept for ``max_age`` (§2.4), then fetched again; while a refetch
fails, the old rules stay in force.

Memory: a crawl may meet 100,000 origins, and Protego's parsed rules take
about 14 bytes per byte of text, 8 KiB at the least. So each origin keeps its
rules' text compressed, and only the origins asked about most recently keep
them parsed (parsed again from the text when next asked). Past
``RobotsConfig.memory`` in all, the origins asked about least recently are
forgotten whole, and their robots.txt is fetched again when next needed.
"""

from __future__ import annotations

import enum
import importlib
import io
import math
import re
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from protego import Protego

from scrapy_aimd.core.hosts import port_number, split_host_port

MAX_BYTES = 500 * 1024
#: Bytes of a robots.txt answer downloaded at most: twice what is parsed, so a
#: compressed body still holds the first ``MAX_BYTES`` (RFC 9309 §2.5 asks for
#: at least 500 KiB), and a huge or endless file is cut there.
MAX_DOWNLOAD_BYTES = 2 * MAX_BYTES
#: The byte order mark that some editors put at the start of a UTF-8 file.
UTF8_BOM = "\ufeff"
#: The default of ``RobotsConfig.memory``: 100,000 origins of a varied mix fit
#: (``benchmarks/bench_robots.py``).
DEFAULT_MEMORY = 128 * 1024 * 1024
#: What an origin costs besides its rules' text, for the budget: its key, its
#: state, the dictionary entries (measured by ``benchmarks/bench_robots.py``).
ORIGIN_BYTES = 400
#: What parsed rules cost, for the budget: Protego keeps about 14 bytes per
#: byte of text, and 8 KiB for the smallest file.
PARSED_BASE = 8 * 1024
PARSED_PER_BYTE = 14
#: The share of ``RobotsConfig.memory`` for parsed rules; the rest is for the
#: origins and their compressed text.
PARSED_SHARE = 0.25


class RobotsOutcome(enum.Enum):
    RULES = "rules"
    ALLOW_ALL = "allow_all"
    UNREACHABLE = "unreachable"


class Verdict(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    WAIT = "wait"


def classify(status: int | None) -> RobotsOutcome:
    """What a robots.txt fetch that ended with ``status`` (None: network failure) means.

    A final 3xx means the redirects were not followed to the end (more than the
    five hops the RFC asks crawlers to follow): the file is unavailable.
    """
    if status is None or status == 429 or status >= 500:
        return RobotsOutcome.UNREACHABLE
    if 200 <= status < 300:
        return RobotsOutcome.RULES
    if 300 <= status < 500:
        return RobotsOutcome.ALLOW_ALL
    return RobotsOutcome.UNREACHABLE


def rules_text(body: bytes, max_bytes: int = MAX_BYTES) -> str:
    """The part of a body that is parsed: its first ``max_bytes``, as text,
    without a leading byte order mark (which would make the first line, often
    ``User-agent: *``, no directive)."""
    return body[:max_bytes].decode("utf-8", errors="replace").removeprefix(UTF8_BOM)


#: Bytes read from a zstd stream at a time.
_CHUNK = 64 * 1024


def content_codings(values: Iterable[bytes | str]) -> list[str]:
    """The codings that ``Content-Encoding`` header values list, in the order they
    were applied (several headers in order, each comma-separated), lowercase,
    without ``identity`` (no coding) and empty elements."""
    codings: list[str] = []
    for value in values:
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        for coding in text.split(","):
            coding = coding.strip().lower()
            if coding and coding != "identity":
                codings.append(coding)
    return codings


def decoded_body(body: bytes, codings: Sequence[str], max_bytes: int = MAX_BYTES) -> bytes | None:
    """A body with ``codings`` (see :func:`content_codings`) undone, the last
    applied first, each to its first ``max_bytes`` + 1 bytes (see
    :func:`decoded_prefix`); None when one cannot be undone: a broken stream, a
    coding this module does not know, or a decoder that is not installed."""
    for coding in reversed(codings):
        decoded = decoded_prefix(body, coding, max_bytes)
        if decoded is None:
            return None
        body = decoded
    return body


def decoded_prefix(body: bytes, encoding: str, max_bytes: int = MAX_BYTES) -> bytes | None:
    """The first ``max_bytes`` + 1 bytes of a body compressed with ``encoding``
    (gzip, deflate, br or zstd): enough to parse and to see that there was more,
    however large it inflates (a bomb), and what a stream cut short holds (a
    download stopped at :data:`MAX_DOWNLOAD_BYTES`). None for another encoding,
    a broken stream, or br or zstd without their decoder installed.
    """
    encoding = encoding.strip().lower()
    limit = max_bytes + 1
    if encoding in ("gzip", "x-gzip"):
        return _inflate(body, (16 + zlib.MAX_WBITS,), limit)
    if encoding == "deflate":  # zlib-wrapped, or raw as some send
        return _inflate(body, (zlib.MAX_WBITS, -zlib.MAX_WBITS), limit)
    if encoding == "br":
        return _unbrotli(body, limit)
    if encoding == "zstd":
        return _unzstd(body, limit)
    return None


def _inflate(body: bytes, windows: tuple[int, ...], limit: int) -> bytes | None:
    for wbits in windows:
        try:
            return zlib.decompressobj(wbits).decompress(body, limit)
        except zlib.error:
            continue
    return None


def _module(*names: str) -> Any:
    """The first of the modules ``names`` that can be imported, or None."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _unbrotli(body: bytes, limit: int) -> bytes | None:
    brotli = _module("brotli", "brotlicffi")
    if brotli is None:
        return None
    out = bytearray()
    try:
        decompressor = brotli.Decompressor()
        out += decompressor.process(body, output_buffer_limit=limit)
        while len(out) < limit and not decompressor.is_finished():
            chunk = decompressor.process(b"", output_buffer_limit=limit - len(out))
            if not chunk:
                break  # a stream cut short: what it held
            out += chunk
    except Exception:  # brotli.error: a broken stream (TypeError: a brotli that cannot bound)
        return None
    return bytes(out[:limit])


def _unzstd(body: bytes, limit: int) -> bytes | None:
    zstd = _module("compression.zstd", "backports.zstd")
    if zstd is not None:
        reader: Any = zstd.ZstdFile(io.BytesIO(body))
    else:
        zstandard = _module("zstandard")
        if zstandard is None:
            return None
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(body), read_across_frames=True
        )
    out = bytearray()
    try:
        while len(out) < limit:
            chunk = reader.read(min(_CHUNK, limit - len(out)))
            if not chunk:
                break
            out += chunk
    except EOFError:
        pass  # a stream cut short: what it held
    except Exception:  # ZstdError: a broken stream
        return None
    return bytes(out)


def resolve_sitemaps(origin: str, values: Iterable[str]) -> tuple[list[str], list[str]]:
    """The ``Sitemap:`` values of ``origin``'s robots.txt as URLs to request,
    relative ones resolved against the robots.txt URL; and apart, the values
    that are no http or https URL with a host (``http://[bad``, ``ftp:...``,
    a port past 65535)."""
    base = f"{origin}/robots.txt"
    valid: list[str] = []
    invalid: list[str] = []
    for value in values:
        url = http_url(base, value.strip())
        if url is None:
            invalid.append(value)
        else:
            valid.append(url)
    return valid, invalid


def http_url(base: str, value: str) -> str | None:
    """``value`` (a Sitemap line, a redirect's Location) resolved against
    ``base``, if it is an http or https URL with a host and a valid port; else
    None."""
    try:
        url = urljoin(base, value)
        parts = urlsplit(url)
    except ValueError:  # "http://[bad"
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    split = split_host_port(parts.netloc.rpartition("@")[2])
    if split is None or (split[1] and port_number(split[1]) is None):
        return None
    return url


def parse_rules(body: bytes, max_bytes: int = MAX_BYTES) -> Protego:
    """Rules from the first ``max_bytes`` of a body; garbage lines are ignored."""
    return Protego.parse(rules_text(body, max_bytes))


@dataclass(frozen=True)
class RobotsConfig:
    max_age: float = 24 * 3600.0
    retries: int = 3
    #: Seconds before the first refetch of an unreachable file; doubles each time.
    backoff: float = 2.0
    max_crawl_delay: float = 60.0
    max_bytes: int = MAX_BYTES
    #: Let :meth:`RobotsBook.snapshot` save rules (a JOBDIR); off, an origin
    #: with rules is fetched again on resume.
    persist: bool = False
    #: Bytes that the origins and their rules may take (an estimate); 0: no bound.
    memory: int = DEFAULT_MEMORY

    def __post_init__(self) -> None:
        if isinstance(self.memory, bool) or not isinstance(self.memory, int) or self.memory < 0:
            raise ValueError(f"memory must be a whole number of bytes >= 0, not {self.memory!r}")


@dataclass(slots=True)
class OriginRobots:
    """What is known of one origin's robots.txt."""

    known: bool = False
    #: Unreachable after every retry: the origin's requests are skipped.
    denied: bool = False
    fetching: bool = False
    failures: int = 0
    fetched_at: float = -math.inf
    retry_at: float = -math.inf
    #: The parsed text of the rules, zlib-compressed; None with ``known`` set
    #: means "no rules: allow all".
    packed: bytes | None = None
    #: The length of that text, uncompressed.
    size: int = 0

    @property
    def settled(self) -> bool:
        """Known or skipped, and not being fetched: it may be forgotten."""
        return (self.known or self.denied) and not self.fetching


@dataclass(frozen=True)
class FetchResult:
    """What one fetch changed, for the caller to act on."""

    outcome: RobotsOutcome
    #: The origin's requests may now be decided (rules, allow-all or deny-all).
    settled: bool
    crawl_delay: float | None = None
    crawl_delay_capped: bool = False
    #: When to fetch again (an unreachable file with retries left), else None.
    retry_at: float | None = None
    truncated: bool = False
    #: A Crawl-delay that the parser gave but no gap can be (nan, inf, negative):
    #: ignored.
    crawl_delay_invalid: object = None


#: The fields that Protego reads as a Crawl-delay.
_CRAWL_DELAY_FIELDS = frozenset(("crawl-delay", "crawl delay"))
_CRAWL_WORD = re.compile("crawl", re.IGNORECASE)
#: Crawl-delay values put in place of the invalid ones to see which of them
#: applies: multiples of this, as no real delay is written.
_MARK = 1e-200


def _crawl_delay_value(line: str) -> str | None:
    """The value of a Crawl-delay line as Protego reads its directives
    ("Crawl-delay: 5", "crawl delay 5", the comment cut off), else None."""
    line = line.partition("#")[0].strip()
    field, colon, value = line.partition(":")
    if colon and field.strip().lower() in _CRAWL_DELAY_FIELDS:
        return value.strip()
    if colon and (not value or value[0].isspace()):
        return None  # another field
    words = line.split()
    for count in (1, 2):
        if " ".join(words[:count]).lower() in _CRAWL_DELAY_FIELDS:
            return " ".join(words[count:])
    return None


def invalid_crawl_delay(text: str, user_agent: str) -> str | None:
    """The Crawl-delay value of ``user_agent``'s group in ``text`` that is no
    delay ("soon", "-1", "nan", "inf"), which Protego drops without a word;
    None when the group has none, or has a valid one (which Protego uses).

    The invalid values are replaced, line by line, with marks that are valid
    delays, and the text parsed again: the mark Protego then gives for the
    agent names the line."""
    if _CRAWL_WORD.search(text) is None:
        return None  # most files: no line to look at
    marked: dict[float, str] = {}
    lines = text.splitlines()
    for index, line in enumerate(lines):
        value = _crawl_delay_value(line)
        if value and _is_invalid_delay(value):
            mark = _MARK * (len(marked) + 1)
            marked[mark] = value
            lines[index] = f"Crawl-delay: {mark!r}"
    if not marked:
        return None
    found = Protego.parse("\n".join(lines)).crawl_delay(user_agent)
    return marked.get(found) if isinstance(found, float) else None


def _is_invalid_delay(value: str) -> bool:
    try:
        return usable_crawl_delay(float(value)) is None
    except ValueError:
        return True


def usable_crawl_delay(value: object) -> float | None:
    """A Crawl-delay as seconds, or None when there is none or it is no finite
    number >= 0 (older Protego releases return ``nan`` for ``Crawl-delay: nan``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    delay = float(value)
    return delay if math.isfinite(delay) and delay >= 0 else None


class RobotsBook:
    """Per-origin robots.txt state: verdicts for URLs and when to fetch."""

    def __init__(self, config: RobotsConfig | None = None) -> None:
        self.config = config or RobotsConfig()
        #: The origins, the one asked about least recently first.
        self.origins: OrderedDict[str, OriginRobots] = OrderedDict()
        #: Parsed rules of the origins asked about most recently, the least first.
        self._parsed: OrderedDict[str, tuple[Protego, int]] = OrderedDict()
        #: Estimated bytes of the origins with their compressed text, and of
        #: the parsed rules.
        self.kept_bytes = 0
        self.parsed_bytes = 0
        #: Origins forgotten to keep within ``config.memory``.
        self.evicted = 0
        #: Times rules were parsed again from their compressed text.
        self.parsed_again = 0

    def state(self, origin: str) -> OriginRobots:
        state = self.origins.get(origin)
        if state is None:
            state = self.origins[origin] = OriginRobots()
            self.kept_bytes += ORIGIN_BYTES
            self._bound(origin)
        return state

    def verdict(self, origin: str, url: str, user_agent: str) -> Verdict:
        state = self.state(origin)
        self.origins.move_to_end(origin)
        if state.denied:
            return Verdict.DENY
        if not state.known:
            return Verdict.WAIT
        rules = self.rules(origin)
        if rules is None or rules.can_fetch(url, user_agent):
            return Verdict.ALLOW
        return Verdict.DENY

    def rules(self, origin: str) -> Protego | None:
        """The origin's parsed rules (None: none known), parsed again from their
        compressed text when they were let go of."""
        cached = self._parsed.get(origin)
        if cached is not None:
            self._parsed.move_to_end(origin)
            return cached[0]
        state = self.origins.get(origin)
        if state is None or state.packed is None:
            return None
        self.parsed_again += 1
        return self._parse(origin, zlib.decompress(state.packed).decode("utf-8"))

    def sitemaps(self, origin: str) -> list[str]:
        """The sitemaps that the origin's rules list."""
        rules = self.rules(origin)
        return [] if rules is None else list(rules.sitemaps)

    def memory_stats(self) -> dict[str, int]:
        """What the book holds, for the stats and the benchmark."""
        return {
            "origins": len(self.origins),
            "parsed": len(self._parsed),
            "kept_bytes": self.kept_bytes,
            "parsed_bytes": self.parsed_bytes,
            "evicted": self.evicted,
            "parsed_again": self.parsed_again,
        }

    def needs_fetch(self, origin: str, now: float) -> bool:
        """True when a fetch should start now: never fetched, stale, or a retry is due."""
        state = self.state(origin)
        if state.fetching or now < state.retry_at:
            return False
        if not state.known and not state.denied:
            return True
        return now - state.fetched_at >= self.config.max_age

    def started(self, origin: str) -> None:
        self.state(origin).fetching = True

    def retries_spent(
        self, origin: str, now: float, status: int | None, user_agent: str
    ) -> FetchResult:
        """Record an unreachable fetch after which no retry is left: another process
        of the crawl spent them. The same end as the last of them fetched here."""
        self.state(origin).failures = self.config.retries
        return self.fetched(origin, now, status, b"", user_agent)

    def fetched(
        self, origin: str, now: float, status: int | None, body: bytes, user_agent: str
    ) -> FetchResult:
        """Record a fetch that ended with ``status`` (None: network failure)."""
        state = self.state(origin)
        state.fetching = False
        outcome = classify(status)
        if outcome is RobotsOutcome.UNREACHABLE:
            result = self._unreachable(state, now)
            self._bound(origin)  # no longer being fetched: another origin may go
            return result
        state.failures = 0
        state.retry_at = -math.inf
        state.known, state.denied, state.fetched_at = True, False, now
        self.origins.move_to_end(origin)
        if outcome is RobotsOutcome.ALLOW_ALL:
            self._set_rules(origin, state, None)
            return FetchResult(outcome, settled=True)
        text = rules_text(body, self.config.max_bytes)
        rules = self._set_rules(origin, state, text)
        assert rules is not None
        found = rules.crawl_delay(user_agent)
        delay = usable_crawl_delay(found)
        capped = delay is not None and delay > self.config.max_crawl_delay
        if delay is not None:
            delay = min(delay, self.config.max_crawl_delay)
        invalid: object = None
        if delay is None:
            # Older Protego releases give nan for "Crawl-delay: nan"; newer ones
            # drop any invalid value.
            invalid = found if found is not None else invalid_crawl_delay(text, user_agent)
        return FetchResult(
            outcome,
            settled=True,
            crawl_delay=delay,
            crawl_delay_capped=capped,
            crawl_delay_invalid=invalid,
            truncated=len(body) > self.config.max_bytes,
        )

    def settle_anyway(self, origin: str, now: float) -> None:
        """End a fetch whose answer could not be handled: rules already taken
        stay; with none known, the origin has no rules (allow all), so that its
        requests never wait for ever."""
        state = self.state(origin)
        state.fetching = False
        if not state.known and not state.denied:
            self._set_rules(origin, state, None)
            state.known = True
            state.failures, state.retry_at, state.fetched_at = 0, -math.inf, now
        self._bound(origin)

    def _set_rules(
        self, origin: str, state: OriginRobots, text: str | None, *, parse: bool = True
    ) -> Protego | None:
        """Keep ``text`` (None: no rules) compressed; parsed too, with ``parse``."""
        self._unparse(origin)
        self.kept_bytes -= len(state.packed or b"")
        state.packed, state.size = None, 0
        rules = None
        if text is not None:
            encoded = text.encode("utf-8")
            state.packed, state.size = zlib.compress(encoded, 6), len(encoded)
            self.kept_bytes += len(state.packed)
            rules = self._parse(origin, text) if parse else None
        self._bound(origin)
        return rules

    # -- the memory budget -------------------------------------------------------

    def _parse(self, origin: str, text: str) -> Protego:
        rules = Protego.parse(text)
        cost = PARSED_BASE + PARSED_PER_BYTE * len(text)
        self._parsed[origin] = (rules, cost)
        self.parsed_bytes += cost
        limit = self.config.memory * PARSED_SHARE
        while limit and self.parsed_bytes > limit and len(self._parsed) > 1:
            self._unparse(next(iter(self._parsed)))
        return rules

    def _unparse(self, origin: str) -> None:
        cached = self._parsed.pop(origin, None)
        if cached is not None:
            self.parsed_bytes -= cached[1]

    def _bound(self, keep: str) -> None:
        """Forget the settled origins asked about least recently while the
        origins and their text take more than their share of the budget;
        never ``keep`` (the origin being changed), nor one being fetched."""
        limit = self.config.memory * (1 - PARSED_SHARE)
        while limit and self.kept_bytes > limit:
            victim = next(
                (o for o, state in self.origins.items() if o != keep and state.settled), None
            )
            if victim is None:
                return
            self.forget(victim)
            self.evicted += 1

    def forget(self, origin: str) -> None:
        """Drop all that is known of ``origin``: it is fetched again when needed."""
        state = self.origins.pop(origin, None)
        if state is not None:
            self._unparse(origin)
            self.kept_bytes -= ORIGIN_BYTES + len(state.packed or b"")

    # -- persistence -------------------------------------------------------------

    def snapshot(self, origin: str) -> dict[str, Any] | None:
        """What is known of ``origin`` as JSON-able data, for :meth:`restore` in a
        later run; None when nothing settled can be saved (rules without their
        text: they are fetched again). ``fetched_at`` is on this book's clock."""
        state = self.origins.get(origin)
        if state is None or not (state.known or state.denied):
            return None
        if state.packed is not None and not self.config.persist:
            return None
        data: dict[str, Any] = {
            "known": state.known,
            "denied": state.denied,
            "fetched_at": state.fetched_at,
        }
        if state.packed is not None:
            data["rules"] = zlib.decompress(state.packed).decode("utf-8")
        return data

    def restore(self, origin: str, data: Mapping[str, Any], now: float) -> bool:
        """Take what a :meth:`snapshot` saved, its ``fetched_at`` moved onto this
        book's clock by the caller; an age beyond ``now`` counts as fetched now.
        False (nothing changed) for an origin already known here or bad data."""
        if origin in self.origins:
            return False
        fetched_at = data.get("fetched_at")
        if (
            isinstance(fetched_at, bool)
            or not isinstance(fetched_at, (int, float))
            or not math.isfinite(fetched_at)
        ):
            return False
        state = self.state(origin)
        state.known = bool(data.get("known"))
        state.denied = bool(data.get("denied"))
        state.fetched_at = min(float(fetched_at), now)
        rules = data.get("rules")
        if isinstance(rules, str):
            text = rules_text(rules.encode("utf-8"), self.config.max_bytes)
            self._set_rules(origin, state, text, parse=False)
        return True

    def _unreachable(self, state: OriginRobots, now: float) -> FetchResult:
        state.failures += 1
        if state.failures <= self.config.retries:
            state.retry_at = now + self.config.backoff * 2 ** (state.failures - 1)
            return FetchResult(RobotsOutcome.UNREACHABLE, settled=False, retry_at=state.retry_at)
        # Retries spent. Rules from an earlier fetch stay in force; with none,
        # the origin is skipped until the file can be fetched again.
        state.failures = 0
        state.retry_at = -math.inf
        state.fetched_at = now
        if not state.known:
            state.denied = True
        return FetchResult(RobotsOutcome.UNREACHABLE, settled=True)
