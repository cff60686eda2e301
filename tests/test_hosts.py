import pytest

from scrapy_aimd.core.hosts import host_key


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://Example.COM/a", "example.com"),
        ("https://example.com/a", "example.com"),
        ("http://example.com:80/", "example.com"),
        ("https://example.com:443/", "example.com"),
        ("http://example.com:443/", "example.com:443"),
        ("https://example.com:8443/x", "example.com:8443"),
        ("http://user:pw@example.com:8080/", "example.com:8080"),
        ("http://example.com./", "example.com"),
        ("http://[::1]:8080/", "[::1]:8080"),
        ("http://[::1]/", "[::1]"),
        ("http://127.0.0.2:41234/p/1", "127.0.0.2:41234"),
        ("http://example.com:/", "example.com"),
        ("data:,hello", ""),
        ("http://[::1/", ""),
    ],
)
def test_host_key(url: str, key: str) -> None:
    assert host_key(url) == key
