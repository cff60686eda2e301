"""Request fingerprints over canonical URLs: 8 bytes, with the rules inside.

:class:`AimdRequestFingerprinter` (for ``REQUEST_FINGERPRINTER_CLASS``) hashes
the method, the canonical URL (:mod:`scrapy_aimd.core.canonical`) and the body with
BLAKE2b, keyed by the rules: a change of canonicalization rules or settings
changes every fingerprint, so keys saved under older rules never silently mix
with new ones. ``meta["verbatim_url"]`` skips canonicalization, as in Scrapy's
own fingerprinter.

The dupefilter (and the scheduler) work with the same digest as a 64-bit int:
:meth:`AimdRequestFingerprinter.request_key`, cached per request object.
"""

from __future__ import annotations

from functools import partial
from hashlib import blake2b
from typing import TYPE_CHECKING, Final
from weakref import WeakKeyDictionary

from scrapy_aimd.core.canonical import FRAGMENT_CHOICES, TRAILING_SLASH_CHOICES, Canonicalizer
from scrapy_aimd.settings import AimdSettingsError, SettingsLike, read_choice, read_str_list

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.crawler import Crawler

__all__ = [
    "CANONICAL_SETTINGS",
    "FINGERPRINT_VERSION",
    "AimdRequestFingerprinter",
    "canonicalizer_from_settings",
    "key_at_url_function",
    "redirected_to_same_key",
    "request_key_function",
    "rules_id_of",
]

#: Bumped whenever what goes into the digest changes.
FINGERPRINT_VERSION: Final = 1

#: The settings that :func:`canonicalizer_from_settings` reads.
CANONICAL_SETTINGS: Final = (
    "AIMD_CANONICAL_TRAILING_SLASH",
    "AIMD_CANONICAL_FRAGMENTS",
    "AIMD_STRIP_PARAMS",
    "AIMD_KEEP_PARAMS",
)


def canonicalizer_from_settings(settings: SettingsLike) -> Canonicalizer:
    """Read ``CANONICAL_SETTINGS``; an invalid value raises
    :class:`AimdSettingsError` naming the setting. (Here, not in the core: the
    canonicalizer itself knows nothing of settings.)"""
    trailing_slash = read_choice(
        settings, "AIMD_CANONICAL_TRAILING_SLASH", "strip", TRAILING_SLASH_CHOICES
    )
    fragments = read_choice(settings, "AIMD_CANONICAL_FRAGMENTS", "drop", FRAGMENT_CHOICES)
    return Canonicalizer(
        trailing_slash=trailing_slash,
        fragments=fragments,
        strip_params=_read_param_patterns(settings, "AIMD_STRIP_PARAMS"),
        keep_params=_read_param_patterns(settings, "AIMD_KEEP_PARAMS"),
    )


def _read_param_patterns(settings: SettingsLike, name: str) -> tuple[str, ...]:
    patterns = read_str_list(settings, name)
    for pattern in patterns:
        body = pattern.strip().removesuffix("*")
        if not body or any(c in body for c in "&=#*"):
            raise AimdSettingsError(
                name, list(patterns), 'query parameter names, or prefixes written "name_*"'
            )
    return patterns


class AimdRequestFingerprinter:
    """An 8-byte BLAKE2b digest of method, canonical URL and body.

    The canonicalizer comes from the crawler's settings (see
    :func:`canonicalizer_from_settings`), or is given directly.
    """

    def __init__(
        self, crawler: Crawler | None = None, *, canonicalizer: Canonicalizer | None = None
    ) -> None:
        if canonicalizer is None:
            canonicalizer = (
                canonicalizer_from_settings(crawler.settings) if crawler else Canonicalizer()
            )
        self.canonicalizer = canonicalizer
        self._canonicalize = canonicalizer.canonicalize
        #: Names everything that decides a key; stored beside persisted keys.
        self.rules_id = f"fingerprint-v{FINGERPRINT_VERSION};blake2b-64;{canonicalizer.rules_id}"
        hash_key = blake2b(self.rules_id.encode(), digest_size=32).digest()
        self._hasher = blake2b(digest_size=8, key=hash_key)
        self._cache: WeakKeyDictionary[Request, tuple[bool, int]] = WeakKeyDictionary()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> AimdRequestFingerprinter:
        return cls(crawler)

    def fingerprint(self, request: Request) -> bytes:
        """The 8-byte digest (Scrapy's fingerprinter interface: the HTTP cache's
        key). A redirect to a URL of the same key as where it came from (``/a``
        to ``/a/``) has a digest of its own, of its exact URL: under its
        source's, the cache answers it with the redirect it follows, and the
        page behind is lost. Duplicates go by :meth:`request_key` alone."""
        key = self.request_key(request)
        if redirected_to_same_key(request, key, partial(self.key_at, request)):
            key = self._redirect_key(request)
        return key.to_bytes(8, "big")

    def key_at(self, request: Request, url: str) -> int:
        """The key ``request`` would have at ``url`` (its method, body and
        ``verbatim_url`` kept), without making the request."""
        verbatim = bool(request.meta.get("verbatim_url"))
        return self.url_key(request.method, url, request.body, verbatim=verbatim)

    def _redirect_key(self, request: Request) -> int:
        url_bytes = request.url.encode("utf-8", "surrogatepass")
        hasher = self._hasher.copy()
        # A leading NUL: no method starts with one, so no url_key is the same.
        hasher.update(
            b"\0redirect %s %d %s%s"
            % (request.method.encode(), len(url_bytes), url_bytes, request.body)
        )
        return int.from_bytes(hasher.digest(), "big")

    def request_key(self, request: Request) -> int:
        """The digest as an unsigned 64-bit int, computed once per request
        object (and per ``verbatim_url`` value)."""
        verbatim = bool(request.meta.get("verbatim_url"))
        cached = self._cache.get(request)
        if cached is not None and cached[0] is verbatim:
            return cached[1]
        key = self.url_key(request.method, request.url, request.body, verbatim=verbatim)
        self._cache[request] = (verbatim, key)
        return key

    def url_key(self, method: str, url: str, body: bytes = b"", *, verbatim: bool = False) -> int:
        """The key of a request given by its parts (no request object needed)."""
        if not verbatim:
            url = self._canonicalize(url)
        url_bytes = url.encode("utf-8", "surrogatepass")
        hasher = self._hasher.copy()
        # The URL's length makes the encoding unambiguous: no URL and body can
        # pass for another split of the same bytes.
        hasher.update(b"%s %d %s%s" % (method.encode(), len(url_bytes), url_bytes, body))
        return int.from_bytes(hasher.digest(), "big")


def redirected_to_same_key(request: Request, key: int, key_of: Callable[[str], int]) -> bool:
    """True if ``request`` (of key ``key``) was redirected from a URL of the
    same key, ``key_of(url)``, and goes to a URL that its chain has not
    requested yet: the page is there, not a duplicate (scrapy #1225)."""
    sources = request.meta.get("redirect_urls")
    if not sources or request.url in sources:
        return False
    return any(key_of(url) == key for url in sources)


def rules_id_of(fingerprinter: object) -> str:
    """What decides a fingerprinter's keys: our rules id, or for any other
    fingerprinter its class, which is all that can be known of its rules."""
    rules_id = getattr(fingerprinter, "rules_id", None)
    if isinstance(rules_id, str):
        return rules_id
    cls = type(fingerprinter)
    return f"fingerprinter:{cls.__module__}.{cls.__qualname__}"


def key_at_url_function(fingerprinter: object) -> Callable[[Request, str], int]:
    """The 64-bit key a request would have at another URL, by ``fingerprinter``:
    ours from the URL alone, any other's from a copy of the request."""
    if isinstance(fingerprinter, AimdRequestFingerprinter):
        return fingerprinter.key_at
    request_key = request_key_function(fingerprinter)

    def of_a_copy(request: Request, url: str) -> int:
        return request_key(request.replace(url=url))

    return of_a_copy


def request_key_function(fingerprinter: object) -> Callable[[Request], int]:
    """The fastest way to a 64-bit key for ``fingerprinter``'s requests: ours
    directly, any other from the first 8 bytes of its fingerprint."""
    if isinstance(fingerprinter, AimdRequestFingerprinter):
        return fingerprinter.request_key
    fingerprint: Callable[[Request], bytes] = fingerprinter.fingerprint  # type: ignore[attr-defined]

    def first_eight_bytes(request: Request) -> int:
        return int.from_bytes(fingerprint(request)[:8], "big")

    return first_eight_bytes
