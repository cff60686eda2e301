"""The 8-stage URL canonicalizer: one key per page, whatever its links carry.

The canonical URL is a dedup key and fingerprint input only; requests go out
with their own URL. Each stage is a small pure function, applied in order:

1. :func:`clean` -- surrounding whitespace and controls, tabs and newlines, scheme case.
2. :func:`canonical_host` -- lowercase, UTS #46 (cached per host), trailing dot, IP forms.
3. :func:`canonical_port` -- empty and default ports dropped.
4. :func:`normalize_percent_encoding` -- uppercase hex, decode unreserved only,
   encode what must be encoded, keep reserved and invalid escapes.
5. :func:`normalize_path` -- dot segments, empty path, trailing slash.
6. :meth:`TrackingRules.filter` -- empty pairs and tracking parameters removed.
7. :func:`sort_query` -- stable sort by key (repeated keys keep their order).
8. :func:`canonical_fragment` -- dropped, kept, or kept for ``#!`` routes.

Nothing here merges URLs that a server could tell apart beyond these stages:
``%2F`` stays distinct from ``/``, ``?a`` from ``?a=``, ``+`` from ``%20``, path
case is kept, and ``a=1&a=2`` keeps its order. No input raises: a URL that
cannot be parsed is its own key, after stage 1.

This module imports neither Scrapy nor Twisted.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

import idna

from scrapy_aimd.core.hosts import DEFAULT_PORTS, port_number, split_host_port

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "RULES_VERSION",
    "STAGES",
    "Canonicalizer",
    "TrackingRules",
    "canonical_fragment",
    "canonical_host",
    "canonical_netloc",
    "canonical_port",
    "canonicalize_url",
    "changed_stages",
    "clean",
    "ipv6_text",
    "normalize_path",
    "normalize_percent_encoding",
    "query_keys",
    "remove_dot_segments",
    "sort_query",
    "split_query",
]

#: Bumped whenever a stage's output changes for some input, so that keys saved
#: under older rules are never silently mixed with new ones.
RULES_VERSION: Final = 1

#: The 8 stages' names, in order, as :meth:`Canonicalizer.changed_stages` gives them.
STAGES: Final = (
    "clean",
    "host",
    "port",
    "percent_encoding",
    "path",
    "query_filter",
    "query_order",
    "fragment",
)

TRAILING_SLASH_CHOICES: Final = ("strip", "keep")
FRAGMENT_CHOICES: Final = ("drop", "keep", "hashbang")


# --- Character classes (RFC 3986, section 2) --------------------------------

_UNRESERVED: Final = "A-Za-z0-9\\-._~"
_SUB_DELIMS: Final = "!$&'()*+,;="
# Characters that each component may carry as they are; anything else (other
# than "%", handled separately) is percent-encoded as UTF-8.
_PATH_SAFE: Final = _UNRESERVED + _SUB_DELIMS + ":@/"
_QUERY_SAFE: Final = _PATH_SAFE + "?"
_USERINFO_SAFE: Final = _UNRESERVED + _SUB_DELIMS + ":"

PATH: Final = "path"
QUERY: Final = "query"
FRAGMENT: Final = "fragment"
USERINFO: Final = "userinfo"

_SAFE_BY_COMPONENT: Final = {
    PATH: _PATH_SAFE,
    QUERY: _QUERY_SAFE,
    FRAGMENT: _QUERY_SAFE,
    USERINFO: _USERINFO_SAFE,
}
# fullmatch: the component is already clean (no escapes, nothing to encode).
_CLEAN_RE: Final = {name: re.compile(f"[{safe}]*") for name, safe in _SAFE_BY_COMPONENT.items()}
# Runs of characters that must be encoded (never "%": escapes are split off first).
_UNSAFE_RE: Final = {name: re.compile(f"[^{safe}%]+") for name, safe in _SAFE_BY_COMPONENT.items()}

_HEXDIGITS: Final = frozenset("0123456789abcdefABCDEF")


def _build_escape_table() -> dict[str, str]:
    """Every two-hex-digit escape body ("2f", "7E" ...) to its canonical form."""
    unreserved = re.compile(f"[{_UNRESERVED}]")
    table: dict[str, str] = {}
    digits = "0123456789abcdefABCDEF"
    for high in digits:
        for low in digits:
            char = chr(int(high + low, 16))
            table[high + low] = char if unreserved.fullmatch(char) else f"%{high}{low}".upper()
    return table


_ESCAPES: Final = _build_escape_table()


def _encode_run(match: re.Match[str]) -> str:
    data = match.group().encode("utf-8", "surrogatepass")
    return "%" + data.hex("%").upper()


# --- Stage 1: clean -----------------------------------------------------------

_C0_CONTROL_OR_SPACE: Final = "".join(chr(i) for i in range(33))
_DROP_TAB_NEWLINE: Final = str.maketrans("", "", "\t\n\r")
_SCHEME_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")


def clean(url: str) -> str:
    """Stage 1: strip surrounding C0 controls and spaces, drop every tab and
    newline, lowercase the scheme (URL Standard, basic URL parser)."""
    url = url.strip(_C0_CONTROL_OR_SPACE)
    if "\t" in url or "\n" in url or "\r" in url:
        url = url.translate(_DROP_TAB_NEWLINE)
    match = _SCHEME_RE.match(url)
    if match is not None:
        end = match.end()
        if not url[: end - 1].islower():
            url = url[:end].lower() + url[end:]
    return url


# --- Stage 2: host ------------------------------------------------------------

# Full stops that UTS #46 maps to ".": a trailing one is a trailing dot.
_DOTS: Final = ".\u3002\uff0e\uff61"
# A host may never contain these once canonical: the URL would split elsewhere.
_HOST_FORBIDDEN_RE: Final = re.compile(r"[/?#@:\\\[\]\s]")
_HOST_UNSAFE_RE: Final = re.compile(r"[^\x21-\x7e]|[/?#@:\\\[\]%]")


# One part of an IPv4 host as the URL Standard reads it: hex, octal or decimal.
#: Digits of the largest IPv4 number, 4294967295.
_IPV4_MAX_DIGITS: Final = 10
_IPV4_PART_RE: Final = re.compile(r"0[xX]([0-9a-fA-F]*)|0([0-7]*)|([1-9][0-9]*)")


def _ipv4(host: str) -> str | None:
    """The dotted-decimal form of a host that the URL Standard reads as IPv4
    ("0x7f.1", "2130706433", "0177.0.0.1"), or None if it is not one."""
    parts = host.split(".")
    if len(parts) > 4 or "" in parts:
        return None
    numbers: list[int] = []
    for part in parts:
        match = _IPV4_PART_RE.fullmatch(part)
        if match is None:
            return None
        hexadecimal, octal, decimal = match.groups()
        if hexadecimal is not None:
            numbers.append(int(hexadecimal or "0", 16))
        elif octal is not None:
            numbers.append(int(octal or "0", 8))
        elif len(decimal) > _IPV4_MAX_DIGITS:
            # Past any IPv4 number, and int() raises past 4300 digits.
            return None
        else:
            numbers.append(int(decimal))
    last = numbers.pop()
    if any(n > 255 for n in numbers) or last >= 256 ** (4 - len(numbers)):
        return None
    for index, number in enumerate(numbers):
        last += number << (8 * (3 - index))
    return str(ipaddress.IPv4Address(last))


def _ends_in_number(host: str) -> bool:
    last = host.rpartition(".")[2]
    if last.isdigit():
        return True
    return last[:2] in ("0x", "0X") and all(c in _HEXDIGITS for c in last[2:])


def _ascii_host(host: str) -> str:
    """The final form of an ASCII host: lowercase, no trailing dots, IPv4 forms
    written as four decimal numbers. Idempotent."""
    host = host.lower().rstrip(".")
    if host and host[-1] in "0123456789abcdefx" and _ends_in_number(host):
        return _ipv4(host) or host
    return host


def _percent_encoded_host(host: str) -> str:
    """Last resort for a host that neither IDNA nor UTS #46 can write in ASCII:
    its UTF-8 bytes, percent-encoded in lowercase (so that lowercasing keeps it)."""
    return _ascii_host(
        _HOST_UNSAFE_RE.sub(
            lambda m: "%" + m.group().encode("utf-8", "surrogatepass").hex("%"), host
        )
    )


def _punycode_labels(host: str) -> str:
    """UTS #46 mapping, then Punycode label by label, without IDNA 2008's
    validity rules: for hosts such as "my_host.bücher.de" that browsers reach."""
    mapped = idna.uts46_remap(host, std3_rules=False, transitional=False)
    return ".".join(
        label if label.isascii() else "xn--" + label.encode("punycode").decode("ascii")
        for label in mapped.split(".")
    )


def ipv6_text(address: ipaddress.IPv6Address) -> str:
    """An IPv6 address as the URL Standard writes it: hexadecimal pieces, the
    first longest run of two or more zero pieces as ``::`` (RFC 5952 §4.2), and
    never a dotted IPv4 tail, which Python 3.13's ``str()`` gives an IPv4-mapped
    address and earlier releases do not: one key on every Python."""
    packed = address.packed
    pieces = [f"{packed[i] << 8 | packed[i + 1]:x}" for i in range(0, 16, 2)]
    best_start, best_length, start = 0, 1, None
    for index, piece in enumerate([*pieces, "end"]):
        if piece == "0":
            start = index if start is None else start
        elif start is not None:
            if index - start > best_length:
                best_start, best_length = start, index - start
            start = None
    text = ":".join(pieces)
    if best_length > 1:
        head = ":".join(pieces[:best_start])
        tail = ":".join(pieces[best_start + best_length :])
        text = f"{head}::{tail}"
    return text if address.scope_id is None else f"{text}%{address.scope_id}"


@functools.lru_cache(maxsize=4096)
def canonical_host(host: str) -> str:
    """Stage 2: lowercase, UTS #46 (non-transitional) to Punycode, no trailing
    dot, IPv4 forms as dotted decimal, IPv6 compressed (RFC 5952). Cached per
    host: a crawl sees few hosts and many URLs."""
    if host[:1] == "[" and host[-1:] == "]":
        try:
            return f"[{ipv6_text(ipaddress.IPv6Address(host[1:-1]))}]"
        except ValueError:
            return host.lower()
    if host.isascii():
        return _ascii_host(host)
    try:
        encoded = idna.encode(host.rstrip(_DOTS), uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError):
        try:
            encoded = _punycode_labels(host)
        except (idna.IDNAError, UnicodeError, ValueError):
            return _percent_encoded_host(host)
    if _HOST_FORBIDDEN_RE.search(encoded):
        # UTS #46 maps some characters to URL delimiters (U+FF0F to "/"): such a
        # host cannot be written without changing where the URL splits.
        return _percent_encoded_host(host)
    return _ascii_host(encoded)


# --- Stage 3: port ------------------------------------------------------------


def canonical_port(scheme: str, port: str) -> str | None:
    """Stage 3: "" for an empty or default port, ":N" otherwise (leading zeros
    dropped), None for a port that is not a number in 0-65535."""
    if not port:
        return ""
    number = port_number(port)  # however many digits: never int() past its limit
    if number is None:
        return None
    if number == DEFAULT_PORTS.get(scheme):
        return ""
    return f":{number}"


@functools.lru_cache(maxsize=8192)
def canonical_netloc(scheme: str, netloc: str) -> str | None:
    """Stages 2 and 3 over a whole authority (userinfo kept as it is, but for
    its percent-encoding). None if the authority cannot be parsed."""
    userinfo, _, hostport = netloc.rpartition("@")
    split = split_host_port(hostport)
    if split is None:
        return None
    host, port = split
    port_part = canonical_port(scheme, port)
    if port_part is None:
        return None
    host = canonical_host(host)
    if userinfo:
        return f"{normalize_percent_encoding(userinfo, USERINFO)}@{host}{port_part}"
    return host + port_part


# --- Stage 4: percent-encoding ----------------------------------------------


def normalize_percent_encoding(text: str, component: str = PATH) -> str:
    """Stage 4: uppercase every escape's hex, decode escapes of unreserved
    characters only (RFC 3986, 6.2.2.2), keep reserved escapes (%2F, %3F, %26)
    and invalid ones ("%zz") as they are, and percent-encode as UTF-8 every
    character that ``component`` may not carry as it is.

    An escape is kept when decoding it would turn an invalid "%" before it into
    a valid escape ("%%34%31" must not become "%41"): that keeps the stage
    idempotent.
    """
    if _CLEAN_RE[component].fullmatch(text):
        return text
    unsafe_sub = _UNSAFE_RE[component].sub
    pieces = text.split("%")
    out = [unsafe_sub(_encode_run, pieces[0])]
    # How the output ends: 0 = no lone "%" in reach, 1 = a lone "%",
    # 2 = a lone "%" and one hex digit.
    lone = 0
    for piece in pieces[1:]:
        canonical = _ESCAPES.get(piece[:2])
        if canonical is None:
            out.append("%")
            rest = unsafe_sub(_encode_run, piece)
            out.append(rest)
            lone = 1 if not rest else 2 if len(rest) == 1 and rest in _HEXDIGITS else 0
            continue
        if lone and len(canonical) == 1 and canonical in _HEXDIGITS:
            canonical = "%" + piece[:2].upper()
        out.append(canonical)
        out.append(unsafe_sub(_encode_run, piece[2:]))
        # A decoded hex digit after a lone "%" was kept encoded above, so no
        # lone "%" is in reach of what follows.
        lone = 0
    return "".join(out)


# --- Stage 5: path ------------------------------------------------------------


def remove_dot_segments(path: str) -> str:
    """RFC 3986, 5.2.4, for a path that starts with "/"."""
    if "/." not in path:
        return path
    output: list[str] = []
    segments = path.split("/")[1:]
    last = len(segments) - 1
    for index, segment in enumerate(segments):
        if segment == "..":
            if output:
                output.pop()
            if index == last:
                output.append("")
        elif segment == ".":
            if index == last:
                output.append("")
        else:
            output.append(segment)
    return "/" + "/".join(output)


def normalize_path(path: str, trailing_slash: str = "strip") -> str:
    """Stage 5: remove dot segments, write an empty path as "/", and (with
    ``trailing_slash="strip"``) drop trailing slashes from a non-root path, so
    that "/a/" and "/a" give one key. Input is already percent-normalized, so
    "%2E" segments count as dots and "%2F" never counts as a slash."""
    if not path:
        return "/"
    if path[0] != "/":
        path = "/" + path
    if "/." in path:
        path = remove_dot_segments(path)
    if trailing_slash == "strip" and path[-1] == "/" and len(path) > 1:
        path = path.rstrip("/") or "/"
    return path


# --- Stages 6 and 7: query ----------------------------------------------------


def split_query(query: str) -> list[str]:
    """The query's pairs, without empty ones ("a=1&&b=2&" has two)."""
    if "&&" in query or query[:1] == "&" or query[-1:] == "&":
        return [pair for pair in query.split("&") if pair]
    return query.split("&") if query else []


def query_keys(pairs: list[str]) -> list[str]:
    """The key of each pair ("a" for "a=1", "a" and "a=")."""
    return [pair.partition("=")[0] for pair in pairs]


def sort_query(pairs: list[str], keys: list[str] | None = None) -> list[str]:
    """Stage 7: a stable sort of the pairs by key; pairs of one key keep their
    order, because servers that read lists read them in order. ``keys``, if
    given, are ``query_keys(pairs)``."""
    if keys is None:
        keys = query_keys(pairs)
    if keys == sorted(keys):
        return pairs
    order = sorted(range(len(pairs)), key=keys.__getitem__)
    return [pairs[i] for i in order]


def _load_default_tracking() -> tuple[frozenset[str], tuple[str, ...]]:
    text = resources.files("scrapy_aimd").joinpath("data/tracking_params.json").read_text()
    data: dict[str, Any] = json.loads(text)
    names = frozenset(name.lower() for tier in ("A", "B") for name in data["tiers"][tier])
    return names, tuple(prefix.lower() for prefix in data["prefixes"])


DEFAULT_STRIP_NAMES, DEFAULT_STRIP_PREFIXES = _load_default_tracking()


def _split_patterns(patterns: Iterable[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    """Names and prefixes (written with a trailing "*"), lowercased."""
    names: set[str] = set()
    prefixes: list[str] = []
    for pattern in patterns:
        pattern = pattern.strip().lower()
        if pattern.endswith("*"):
            prefixes.append(pattern[:-1])
        elif pattern:
            names.add(pattern)
    return frozenset(names), tuple(sorted(set(prefixes)))


class TrackingRules:
    """Stage 6: which query parameters are tracking, not content.

    Tiers A and B of the tracking-parameter table are stripped, plus
    ``strip`` (names, or prefixes written "name_*"); ``keep`` exempts names or
    prefixes from both. Names compare case-insensitively, after
    percent-normalization ("utm%5Fsource" is "utm_source").
    """

    def __init__(self, strip: Iterable[str] = (), keep: Iterable[str] = ()) -> None:
        extra_names, extra_prefixes = _split_patterns(strip)
        self.keep_names, self.keep_prefixes = _split_patterns(keep)
        self.strip_names = (DEFAULT_STRIP_NAMES | extra_names) - self.keep_names
        self.strip_prefixes = tuple(sorted(set(DEFAULT_STRIP_PREFIXES + extra_prefixes)))

    def is_tracking(self, name: str) -> bool:
        name = name.lower()
        if name in self.keep_names or (self.keep_prefixes and name.startswith(self.keep_prefixes)):
            return False
        return name in self.strip_names or (
            bool(self.strip_prefixes) and name.startswith(self.strip_prefixes)
        )

    def filter(self, pairs: list[str], keys: list[str] | None = None) -> list[str]:
        """The pairs whose names are not tracking parameters (``pairs`` itself
        if none is). ``keys``, if given, are ``query_keys(pairs)``."""
        if keys is None:
            keys = query_keys(pairs)
        keys = "&".join(keys).lower().split("&")
        if self.strip_names.isdisjoint(keys) and not any(
            key.startswith(self.strip_prefixes) for key in keys
        ):
            return pairs
        return [pair for pair, key in zip(pairs, keys, strict=True) if not self.is_tracking(key)]

    def describe(self) -> str:
        """A stable text that changes whenever the rules do (for the rules id)."""
        return "strip={};prefixes={};keep={};keep_prefixes={}".format(
            ",".join(sorted(self.strip_names)),
            ",".join(self.strip_prefixes),
            ",".join(sorted(self.keep_names)),
            ",".join(self.keep_prefixes),
        )


# --- Stage 8: fragment --------------------------------------------------------


def canonical_fragment(fragment: str | None, mode: str = "drop") -> str | None:
    """Stage 8: None (no fragment) unless ``mode`` keeps it: "keep" keeps any
    non-empty fragment, "hashbang" only ``#!`` routes (single-page apps whose
    fragment names the page)."""
    if not fragment or mode == "drop":
        return None
    if mode == "hashbang" and fragment[0] != "!":
        return None
    return normalize_percent_encoding(fragment, FRAGMENT)


# --- The canonicalizer --------------------------------------------------------

_SPLIT_RE: Final = re.compile(
    r"([a-z][a-z0-9+.\-]*)://([^/?#]*)([^?#]*)(?:\?([^#]*))?(?:#(.*))?", re.S
)


def _special_backslashes(url: str, scheme: str) -> str:
    """For special schemes the URL Standard reads "\\" as "/" before the query."""
    # Schemes whose authority ends at "\\" as well as "/" (URL Standard) are those
    # with a default port.
    if scheme not in DEFAULT_PORTS and scheme != "file":
        return url
    cut = len(url)
    for delimiter in "?#":
        index = url.find(delimiter)
        if 0 <= index < cut:
            cut = index
    return url[:cut].replace("\\", "/") + url[cut:]


class Canonicalizer:
    """The 8 stages with one set of options; :meth:`canonicalize` is the key.

    ``trailing_slash``: "strip" (default) or "keep". ``fragments``: "drop"
    (default), "keep" or "hashbang". ``strip_params``/``keep_params``: extra
    tracking parameter names (or "prefix*") to strip, and names to exempt.
    """

    def __init__(
        self,
        *,
        trailing_slash: str = "strip",
        fragments: str = "drop",
        strip_params: Iterable[str] = (),
        keep_params: Iterable[str] = (),
    ) -> None:
        if trailing_slash not in TRAILING_SLASH_CHOICES:
            raise ValueError(f"trailing_slash must be one of {TRAILING_SLASH_CHOICES}")
        if fragments not in FRAGMENT_CHOICES:
            raise ValueError(f"fragments must be one of {FRAGMENT_CHOICES}")
        self.trailing_slash = trailing_slash
        self.fragments = fragments
        self.tracking = TrackingRules(strip_params, keep_params)
        #: Names everything that decides the output; changes with any option.
        self.rules_id = (
            f"canonical-v{RULES_VERSION};slash={trailing_slash};fragments={fragments};"
            + self.tracking.describe()
        )

    def canonicalize(self, url: str) -> str:
        """The canonical form of ``url``; never raises."""
        try:
            return self._canonicalize(url)
        except Exception:  # pragma: no cover - a key must never stop a crawl
            # The property tests run the stages unguarded; this is defence in
            # depth for inputs no test imagined: such a URL is its own key.
            return url

    def _canonicalize(self, url: str) -> str:
        url = clean(url)
        if "\\" in url:
            scheme = url.partition(":")[0]
            url = _special_backslashes(url, scheme)
        match = _SPLIT_RE.fullmatch(url)
        if match is None:
            return url
        scheme, netloc, path, query, fragment = match.groups()
        netloc = canonical_netloc(scheme, netloc)
        if netloc is None:
            return url
        path = normalize_path(normalize_percent_encoding(path, PATH), self.trailing_slash)
        parts = [scheme, "://", netloc, path]
        if query:
            pairs = split_query(normalize_percent_encoding(query, QUERY))
            if pairs:
                keys = query_keys(pairs)
                kept = self.tracking.filter(pairs, keys)
                if kept is not pairs:
                    keys = query_keys(kept)
                if len(kept) > 1:
                    kept = sort_query(kept, keys)
                if kept:
                    parts += ("?", "&".join(kept))
        if fragment and self.fragments != "drop":
            fragment = canonical_fragment(fragment, self.fragments)
            if fragment:
                parts += ("#", fragment)
        return "".join(parts)

    def changed_stages(self, url: str) -> tuple[str, ...]:
        """The names of the stages (:data:`STAGES`) that change ``url``, in
        stage order: () exactly when ``url`` is canonical already. Never raises.

        For telling why a duplicate was one, not for the hot path: it walks the
        stages once more, each on its own part of the URL. A change that a later
        stage throws away is not counted: an escape inside a tracking parameter
        is the query filter's, not the percent-encoding's. The backslashes that
        the URL Standard reads as slashes count as stage 1's, as its tabs do.
        """
        try:
            changed = self._changed_stages(url)
        except Exception:  # pragma: no cover - as in canonicalize: its own key
            return ()
        return tuple(stage for stage in STAGES if stage in changed)

    def _changed_stages(self, url: str) -> set[str]:
        """:meth:`_canonicalize` step by step, noting the stages that change a part."""
        changed: set[str] = set()
        cleaned = clean(url)
        if "\\" in cleaned:
            cleaned = _special_backslashes(cleaned, cleaned.partition(":")[0])
        if cleaned != url:
            changed.add("clean")
        match = _SPLIT_RE.fullmatch(cleaned)
        if match is None:
            return changed
        scheme, netloc, path, query, fragment = match.groups()
        authority = canonical_netloc(scheme, netloc)
        if authority is None:
            return changed
        if authority != netloc:
            changed |= _authority_stages(scheme, netloc)
        encoded = normalize_percent_encoding(path, PATH)
        if encoded != path:
            changed.add("percent_encoding")
        if normalize_path(encoded, self.trailing_slash) != encoded:
            changed.add("path")
        if query is not None:
            changed |= self._query_stages(query)
        if fragment is not None:
            kept = canonical_fragment(fragment, self.fragments)
            if kept is None:
                changed.add("fragment")
            elif kept != fragment:
                changed.add("percent_encoding")
        return changed

    def _query_stages(self, query: str) -> set[str]:
        """Stages 4, 6 and 7 over a query, pair by pair (an escape never spans
        an "&", so each pair normalizes as it does within the whole query)."""
        changed: set[str] = set()
        kept: list[str] = []
        for raw in query.split("&"):
            pair = normalize_percent_encoding(raw, QUERY) if raw else raw
            if not pair or self.tracking.is_tracking(pair.partition("=")[0]):
                changed.add("query_filter")
                continue
            if pair != raw:
                changed.add("percent_encoding")
            kept.append(pair)
        if len(kept) > 1 and sort_query(kept) != kept:
            changed.add("query_order")
        return changed


def _authority_stages(scheme: str, netloc: str) -> set[str]:
    """The stages that change an authority that :func:`canonical_netloc` can read."""
    changed: set[str] = set()
    userinfo, at, hostport = netloc.rpartition("@")
    split = split_host_port(hostport)
    assert split is not None  # canonical_netloc read it
    host, port = split
    if canonical_host(host) != host:
        changed.add("host")
    if canonical_port(scheme, port) != hostport[len(host) :]:
        changed.add("port")
    if userinfo and normalize_percent_encoding(userinfo, USERINFO) != userinfo:
        changed.add("percent_encoding")
    if at and not userinfo:
        changed.add("host")  # an empty userinfo: "@" dropped with it (stages 2-3)
    return changed


_DEFAULT = Canonicalizer()


def canonicalize_url(url: str) -> str:
    """The canonical form of ``url`` under the default rules (trailing slash
    stripped, fragment dropped, tracking tiers A and B stripped)."""
    return _DEFAULT.canonicalize(url)


def changed_stages(url: str) -> tuple[str, ...]:
    """:meth:`Canonicalizer.changed_stages` under the default rules."""
    return _DEFAULT.changed_stages(url)
