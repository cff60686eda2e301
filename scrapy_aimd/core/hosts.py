"""The host key: what one politeness controller is responsible for.

A host is the URL's authority without the scheme and the user information,
lowercased, with the port only when it is not the scheme's default: http and
https to the same server share one controller, as they share one server.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}


@lru_cache(maxsize=65536)
def host_key_from_netloc(scheme: str, netloc: str) -> str:
    """The host key of a URL's scheme and netloc (cached: few distinct values)."""
    hostport = netloc.rpartition("@")[2].lower()
    if hostport.startswith("["):
        host, _, rest = hostport.partition("]")
        host += "]"
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = hostport.partition(":")
    host = host.rstrip(".")
    if not port or not port.isdigit() or int(port) == DEFAULT_PORTS.get(scheme.lower()):
        return host
    return f"{host}:{int(port)}"


def host_key(url: str) -> str:
    """The host key of a URL; an unparseable URL gives the empty string."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    return host_key_from_netloc(parts.scheme, parts.netloc)
