"""Scrapy signals that carry scrapy-aimd's feedback and host events.

Connect to them like to Scrapy's own: ``crawler.signals.connect(handler,
signal=scrapy_aimd.signals.host_paused)``. Handlers get the keyword arguments
listed below (and may omit any they do not need).
"""

#: Sent by ``AimdDownloaderMiddleware`` for every request it sees come back:
#: ``request``, ``response`` (or None), ``status`` (or None), ``latency`` (fetch
#: seconds, or None), ``retry_after`` (seconds, or None), ``exception`` (or
#: None), ``timeout`` (bool) and ``downloaded`` (False when the request never
#: reached the network: ignored, or answered from a cache).
response_feedback = object()

#: A host pushed back and its controller slowed down: ``host``, ``reason``
#: ("429", "503", "timeout", "latency", ...), ``delay``, ``concurrency``.
host_throttled = object()

#: A host asked for a pause (Retry-After): ``host``, ``seconds``.
host_paused = object()

#: A host that had been throttled or paused answered well again: ``host``,
#: ``delay``, ``concurrency``.
host_recovered = object()
