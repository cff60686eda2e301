"""The host key and the robots.txt origin of a Scrapy request (scrapy_aimd.crawl)."""

import pytest
from scrapy import Request

from scrapy_aimd.crawl import request_origin


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://example.com/a", "http://example.com"),
        ("https://example.com:8443/a?b", "https://example.com:8443"),
        ("http://user:secret@example.com/a", "http://example.com"),
        ("http://user@example.com:81/", "http://example.com:81"),
    ],
)
def test_the_origin_is_scheme_host_and_port_without_user_information(url: str, origin: str) -> None:
    assert request_origin(Request(url)) == origin
