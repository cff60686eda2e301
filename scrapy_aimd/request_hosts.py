"""The host key and the robots.txt origin of a Scrapy request.

Both come from Scrapy's per-request parsed-URL cache, so the per-request path
parses each URL once, whoever asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.httpobj import urlparse_cached

from scrapy_aimd.core.hosts import host_key_from_netloc

if TYPE_CHECKING:
    from scrapy import Request


def request_host(request: Request) -> str:
    """The host key of a request (see ``scrapy_aimd.core.hosts``)."""
    parts = urlparse_cached(request)
    return host_key_from_netloc(parts.scheme, parts.netloc)


def request_origin(request: Request) -> str:
    """scheme://host[:port] as written: robots.txt is per scheme, host and port."""
    parts = urlparse_cached(request)
    return f"{parts.scheme}://{parts.netloc}"
