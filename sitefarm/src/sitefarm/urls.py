"""How the farm's server reads a request target, and how its pages spell links.

The server folds every variant a canonicalizer should fold (tracking parameters, case,
percent-encoded unreserved characters, dot segments, trailing slash, query order, empty
pairs) into one page, and keeps what must stay distinct (real query parameters, reserved
escapes such as %2F) distinct.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

#: Parameters the server ignores, as a site's analytics does (plus any utm_* name).
TRACKING_PARAMS = frozenset(
    {
        "fbclid",
        "gclid",
        "dclid",
        "gbraid",
        "wbraid",
        "msclkid",
        "yclid",
        "twclid",
        "ttclid",
        "igshid",
        "mc_cid",
        "mc_eid",
        "_ga",
        "_gl",
        "mkt_tok",
        "li_fat_id",
    }
)

_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def decode_unreserved(text: str) -> str:
    """Decode escapes of unreserved characters only; uppercase the hex of the others."""

    def replace(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in UNRESERVED else "%" + match.group(1).upper()

    return _ESCAPE.sub(replace, text)


def remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4."""
    output: list[str] = []
    segments = path.split("/")
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == ".":
            if last:
                output.append("")
        elif segment == "..":
            if len(output) > 1:
                output.pop()
            if last:
                output.append("")
        else:
            output.append(segment)
    result = "/".join(output)
    if path.startswith("/") and not result.startswith("/"):
        result = "/" + result
    return result or "/"


def is_tracking_param(key: str) -> bool:
    lowered = key.lower()
    return lowered.startswith("utm_") or lowered in TRACKING_PARAMS


@dataclass(frozen=True)
class Target:
    """A request target as the server routes it."""

    path: str
    """Unreserved escapes decoded, dot segments removed, trailing slash kept."""
    query: tuple[tuple[str, str], ...]
    """Real parameters only (no tracking, no empty pairs), sorted by key, stable."""

    @property
    def page_key(self) -> str:
        """The page this target names: trailing slash removed, real query appended."""
        path = self.path[:-1] if len(self.path) > 1 and self.path.endswith("/") else self.path
        if not self.query:
            return path
        return path + "?" + "&".join(f"{k}={v}" for k, v in self.query)


def parse_target(raw: str) -> Target | None:
    """None for a target that is neither origin-form nor absolute-form."""
    if raw.lower().startswith(("http://", "https://")):
        parts = urlsplit(raw)
        path, query = parts.path or "/", parts.query
    elif raw.startswith("/"):
        rest = raw.split("#", 1)[0]
        path, _, query = rest.partition("?")
    else:
        return None
    path = remove_dot_segments(decode_unreserved(path))
    pairs: list[tuple[str, str]] = []
    for piece in query.split("&"):
        if not piece:
            continue
        key, _, value = piece.partition("=")
        key = decode_unreserved(key)
        if not key or is_tracking_param(key):
            continue
        pairs.append((key, decode_unreserved(value)))
    pairs.sort(key=lambda pair: pair[0])
    return Target(path=path, query=tuple(pairs))


#: Kinds of link variant a page with ``tracking_links`` uses, besides the plain link.
VARIANT_KINDS = (
    "utm",
    "fbclid",
    "gclid",
    "fragment",
    "upper_host",
    "default_port",
    "trailing_slash",
    "percent",
    "query_order",
    "empty_pairs",
    "dot_segments",
)


def _query_string(pairs: list[tuple[str, str]]) -> str:
    return "&".join(f"{k}={v}" for k, v in pairs)


def link_variant(
    base_url: str, path: str, query: tuple[tuple[str, str], ...], kind: str, token: int
) -> str:
    """A link to page (path, query) of the host at base_url, spelled as ``kind``.

    A kind that does not apply (a default port on an ephemeral port, query order with
    fewer than two parameters) falls back to utm parameters. "upper_host" uppercases the
    host name when it has letters and the scheme when it is an IP address.
    """
    pairs = list(query)
    suffix = ""
    origin = ""
    if kind == "utm":
        tracking = [
            ("utm_source", "newsletter"),
            ("utm_medium", "email"),
            ("utm_campaign", f"c{token % 7}"),
        ]
        pairs = tracking + pairs if token % 2 else pairs + tracking
        if token % 3 == 0:
            suffix = f"#top-{token % 5}"
    elif kind == "fbclid":
        pairs = [*pairs, ("fbclid", f"IwAR{token:08x}")]
    elif kind == "gclid":
        pairs = [("gclid", f"EAIaIQ{token:08x}"), *pairs]
    elif kind == "fragment":
        suffix = f"#section-{token % 5}"
    elif kind == "upper_host":
        scheme, _, rest = base_url.partition("://")
        host, colon, port = rest.partition(":")
        if any(c.isalpha() for c in host):
            origin = f"{scheme}://{host.upper()}{colon}{port}"
        else:
            origin = f"{scheme.upper()}://{rest}"
    elif kind == "default_port":
        parts = urlsplit(base_url)
        if parts.port in (None, 80):
            origin = f"http://{parts.hostname}:80"
        else:
            return link_variant(base_url, path, query, "utm", token)
    elif kind == "trailing_slash":
        path = path + "/" if path != "/" else path
    elif kind == "percent":
        positions = [i for i, c in enumerate(path) if c.isalnum()]
        if positions:
            index = positions[token % len(positions)]
            escape = f"%{ord(path[index]):02x}" if token % 2 else f"%{ord(path[index]):02X}"
            path = path[:index] + escape + path[index + 1 :]
    elif kind == "query_order":
        if len(pairs) < 2:
            return link_variant(base_url, path, query, "utm", token)
        pairs = pairs[::-1]
    elif kind == "empty_pairs":
        text = "&" + _query_string(pairs) + "&&" if pairs else ""
        return f"{path}?{text}"
    elif kind == "dot_segments":
        # Absolute, so that a client's urljoin does not resolve the dots before the
        # canonicalizer sees them.
        origin = base_url
        path = f"/x/..{path}" if token % 2 else path.replace("/p/", "/p/./", 1)
    elif kind != "plain":
        raise ValueError(f"unknown link variant {kind!r}")
    text = path
    if pairs:
        text += "?" + _query_string(pairs)
    return origin + text + suffix
