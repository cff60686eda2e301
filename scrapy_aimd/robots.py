"""The old path of :class:`~scrapy_aimd.robots_middleware.RobotsTxtMiddleware`.

``DOWNLOADER_MIDDLEWARES`` written as the docs once showed,
``"scrapy_aimd.robots.RobotsTxtMiddleware": 100``, keep working.
"""

from scrapy_aimd.robots_middleware import RobotsTxtMiddleware

__all__ = ["RobotsTxtMiddleware"]
