"""Requests as bytes, for every store that keeps them out of memory: the
JOBDIR's SQLite frontier and the fleet's Redis queues.

``Request.to_dict(spider=...)`` without its defaults, pickled; a shortcut for
plain requests (spider methods as callbacks) that skips ``to_dict``'s and
``request_from_dict``'s lookups. A request that cannot be stored (a callback
that is not a spider method, meta that does not pickle) is reported once per
callback and kept in memory by its store.
"""

from __future__ import annotations

import logging
import pickle
from typing import TYPE_CHECKING, Any, ClassVar, Final

from scrapy import Request
from scrapy.utils.request import request_from_dict

from scrapy_aimd.robots_middleware import ROBOTS_META

if TYPE_CHECKING:
    from scrapy import Spider

__all__ = ["PLAIN_ATTRIBUTES", "RequestCodec"]

logger = logging.getLogger(__name__)

#: Request.to_dict() entries left out when they have these values (the defaults).
_DEFAULTS: Final[dict[str, Any]] = {
    "callback": None,
    "errback": None,
    "headers": {},
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "flags": [],
    "cb_kwargs": {},
    "dont_filter": False,
    "method": "GET",
    "priority": 0,
}


#: Scrapy 2.19's ``Request.attributes``: what the codec's shortcut stores.
PLAIN_ATTRIBUTES: Final = (
    "url",
    "headers",
    "body",
    "cookies",
    "meta",
    "encoding",
    "flags",
    "cb_kwargs",
    "callback",
    "dont_filter",
    "errback",
    "method",
    "priority",
)
_PLAIN_KEYS: Final = frozenset(PLAIN_ATTRIBUTES)
#: A callback's name that the spider does not have (request_from_dict raises).
_MISSING: Final = object()


class RequestCodec:
    """Requests as bytes: ``Request.to_dict(spider=...)`` without its defaults, pickled.

    A plain ``Request`` (the class itself, its callback and errback None or
    methods of the spider) takes a shortcut both ways: its dict is built from
    its attributes as ``to_dict`` builds it, key for key and in the same order,
    so the bytes are the same; and it is decoded by calling ``Request`` with
    the stored values, as ``request_from_dict`` does, without its lookups.
    ``to_dict`` (its search of the spider's members, its generic loops) and the
    dropping of defaults after it were more than half the cost of encoding a
    request, which a fleet worker pays for every request it queues. Anything
    else goes through ``to_dict`` and ``request_from_dict``.
    """

    #: Whether the shortcut applies: Scrapy's ``Request`` has the attributes it
    #: knows (``tests/test_request_codec.py`` fails loudly when it does not).
    shortcut: ClassVar[bool] = Request.attributes == PLAIN_ATTRIBUTES

    def __init__(self, spider: Spider) -> None:
        self.spider = spider
        self._reported: set[str] = set()

    def encode(self, request: Request) -> bytes | None:
        """The request's bytes, or None (logged) when it cannot be serialized."""
        try:
            data = self._plain_dict(request) if self.shortcut else None
            if data is None:
                data = request.to_dict(spider=self._spider_view(request))  # type: ignore[arg-type]
                for name, default in _DEFAULTS.items():
                    if name in data and type(data[name]) is type(default) and data[name] == default:
                        del data[name]
            return pickle.dumps(data, protocol=5)
        except Exception as exc:  # a callback not of the spider, an unpicklable meta
            self._report(request, exc)
            return None

    def _plain_dict(self, request: Request) -> dict[str, Any] | None:
        """What ``to_dict`` gives for a plain request, defaults left out, or None
        when the request is not plain. Each value is read as ``to_dict`` reads
        it (the properties, which create an empty ``meta`` and the like), and
        left out only when it is a default of the default's type."""
        if type(request) is not Request:
            return None
        callback, errback = request.callback, request.errback
        data: dict[str, Any] = {"url": request.url}
        if callback is not None:
            name = self._method_name(callback)
            if name is None:
                return None
            data["callback"] = name
        if errback is not None:
            name = self._method_name(errback)
            if name is None:
                return None
            data["errback"] = name
        headers = dict(request.headers)
        if headers:
            data["headers"] = headers
        for name, value in (
            ("body", request.body),
            ("cookies", request.cookies),
            ("meta", request.meta),
            ("encoding", request.encoding),
            ("flags", request.flags),
            ("cb_kwargs", request.cb_kwargs),
            ("dont_filter", request.dont_filter),
            ("method", request.method),
            ("priority", request.priority),
        ):
            default = _DEFAULTS[name]
            if type(value) is not type(default) or value != default:
                data[name] = value
        return data

    def _method_name(self, function: object) -> str | None:
        """The name under which ``to_dict`` (given ``_spider_view``) stores a
        method of the spider, or None for anything else."""
        bound = getattr(function, "__func__", None)
        name: str = getattr(function, "__name__", "")
        if (
            bound is None
            or getattr(function, "__self__", None) is not self.spider
            or getattr(getattr(self.spider, name, None), "__func__", None) is not bound
        ):
            return None
        return name

    def _spider_view(self, request: Request) -> Spider | _Methods:
        """The spider as ``to_dict`` needs it: its methods that are the request's
        callback and errback, under their names. ``to_dict`` finds the names with
        ``inspect.getmembers(spider)``, which reads every attribute of the spider
        (properties too: ``spider.logger`` builds an adapter): two thirds of the
        cost of storing a request. Anything else gets the spider itself, and
        ``to_dict`` decides."""
        methods: dict[str, object] = {}
        for function in (request.callback, request.errback):
            if not callable(function):
                continue
            name = self._method_name(function)
            if name is None:
                return self.spider
            methods[name] = function
        return _Methods(methods)

    def decode(self, data: bytes) -> Request:
        """The request of ``encode``'s bytes, as ``request_from_dict`` makes it."""
        stored = pickle.loads(data)
        if self.shortcut and type(stored) is dict and stored.keys() <= _PLAIN_KEYS:
            spider = self.spider
            callback, errback = stored.get("callback"), stored.get("errback")
            # As request_from_dict: a name is looked up if it is truthy.
            if callback and spider:
                callback = getattr(spider, str(callback), _MISSING)
            if errback and spider:
                errback = getattr(spider, str(errback), _MISSING)
            if callback is not _MISSING and errback is not _MISSING:
                if "callback" in stored:
                    stored["callback"] = callback
                if "errback" in stored:
                    stored["errback"] = errback
                return Request(**stored)
        return request_from_dict(stored, spider=self.spider)

    def _report(self, request: Request, exc: Exception) -> None:
        if ROBOTS_META in request.meta:  # fetched again on resume if needed
            logger.debug("Keeping %s in memory only: %s", request, exc)
            return
        callback = getattr(request.callback, "__qualname__", repr(request.callback))
        if callback in self._reported:
            logger.debug("Keeping %s in memory only: %s", request, exc)
            return
        self._reported.add(callback)
        # "Unable to serialize request", as Scrapy's scheduler says it.
        logger.warning(
            "Unable to serialize request %s (%s): it is kept in memory only, and a crash "
            "loses it. Requests are stored with Request.to_dict(spider=...); use spider "
            "methods as callbacks and picklable meta. (Logged once per callback; see "
            "aimd/jobdir/unserializable.)",
            request,
            exc,
        )


class _Methods:
    """Attributes that are the only ones ``dir()`` lists."""

    def __init__(self, methods: dict[str, object]) -> None:
        self.__dict__.update(methods)

    def __dir__(self) -> list[str]:
        return list(self.__dict__)
