"""The host key: what one politeness controller is responsible for.

A host is the URL's authority without the scheme and the user information,
lowercased, with the port only when it is not the scheme's default: http and
https to the same server share one controller, as they share one server.

The default ports and the splitting of ``host:port`` live here once, for the
canonicalizer and the settings too.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final
from urllib.parse import urlsplit

DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
#: The largest port number.
MAX_PORT: Final = 65535


def port_number(port: str) -> int | None:
    """The number of a URL's port, leading zeros however many; None when it is
    no port: not ASCII digits ("\u0661", "\u00b2", " 80"), or past 65535. Never
    raises, even past Python's 4300-digit limit of ``int()``."""
    if not (port.isascii() and port.isdigit()):
        return None
    digits = port.lstrip("0")
    if len(digits) > len(str(MAX_PORT)):
        return None
    number = int(digits or "0")
    return number if number <= MAX_PORT else None


def split_host_port(hostport: str) -> tuple[str, str] | None:
    """``host:port`` (or ``[v6]:port``) as (host, port); port "" when absent.

    None when a bracketed IPv6 host is not closed or is followed by something
    other than a port.
    """
    if hostport[:1] == "[":
        end = hostport.find("]")
        if end < 0:
            return None
        rest = hostport[end + 1 :]
        if rest and rest[0] != ":":
            return None
        return hostport[: end + 1], rest[1:]
    host, _, port = hostport.partition(":")
    return host, port


@lru_cache(maxsize=65536)
def host_key_from_netloc(scheme: str, netloc: str) -> str:
    """The host key of a URL's scheme and netloc (cached: few distinct values);
    the empty string when its port is no port (see :func:`port_number`), as for
    a URL that cannot be parsed."""
    hostport = netloc.rpartition("@")[2].lower()
    host, port = split_host_port(hostport) or (hostport, "")
    host = host.rstrip(".")
    if not port:
        return host
    number = port_number(port)
    if number is None:
        return ""
    if number == DEFAULT_PORTS.get(scheme.lower()):
        return host
    return f"{host}:{number}"


def origin_from_netloc(scheme: str, netloc: str) -> str:
    """``scheme://host[:port]``, one spelling per site: the host key (user
    information left out, host lowercased, without a trailing dot, the port
    only when it is not the scheme's default: ``http://Host.:80`` is
    ``http://host``). A port that is no port is kept as written."""
    key = host_key_from_netloc(scheme, netloc) or netloc.rpartition("@")[2].lower()
    return f"{scheme.lower()}://{key}"


def host_key(url: str) -> str:
    """The host key of a URL; an unparseable URL, or one whose port is no port,
    gives the empty string."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    return host_key_from_netloc(parts.scheme, parts.netloc)
