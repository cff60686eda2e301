"""The old path of :class:`~scrapy_aimd.feedback_middleware.AimdDownloaderMiddleware`.

``DOWNLOADER_MIDDLEWARES`` written as the docs once showed,
``"scrapy_aimd.middleware.AimdDownloaderMiddleware": 950``, keep working.
"""

from scrapy_aimd.feedback_middleware import AimdDownloaderMiddleware

__all__ = ["AimdDownloaderMiddleware"]
