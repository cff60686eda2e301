"""``scrapy_aimd.Addon``: the one line a user adds to ``settings.py``.

``ADDONS = {"scrapy_aimd.Addon": 500}`` sets the scheduler, the feedback
middleware, the fingerprinter and the duplicate filter, and switches off what
would fight them: AutoThrottle, the downloader's own per-slot delay, and a
per-domain concurrency below the controller's maximum. The user's
``DOWNLOAD_DELAY`` and ``CONCURRENT_REQUESTS_PER_DOMAIN`` are not lost: they
become ``AIMD_MIN_DELAY`` and ``AIMD_MAX_CONCURRENCY`` unless those are set.
Every change is logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.settings import SETTINGS_PRIORITIES

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from scrapy_aimd.core.controller import ControllerConfig

logger = logging.getLogger(__name__)

MIDDLEWARE = "scrapy_aimd.feedback_middleware.AimdDownloaderMiddleware"
MIDDLEWARE_PRIORITY = 950
ROBOTS_MIDDLEWARE = "scrapy_aimd.robots_middleware.RobotsTxtMiddleware"
#: The paths under which the docs once named the middlewares: a project that
#: lists one of them already has that middleware.
OLD_PATHS = {
    MIDDLEWARE: "scrapy_aimd.middleware.AimdDownloaderMiddleware",
    ROBOTS_MIDDLEWARE: "scrapy_aimd.robots.RobotsTxtMiddleware",
}
SCRAPY_ROBOTS_MIDDLEWARE = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
COMPONENTS = {
    "SCHEDULER": "scrapy_aimd.scheduler.AimdScheduler",
    "REQUEST_FINGERPRINTER_CLASS": "scrapy_aimd.fingerprint.AimdRequestFingerprinter",
    "DUPEFILTER_CLASS": "scrapy_aimd.dupefilter.AimdDupeFilter",
}


class Addon:
    """Enables scrapy-aimd in a Scrapy project or spider."""

    def update_settings(self, settings: BaseSettings) -> None:
        changes: list[str] = []

        def force(name: str, value: Any, *, log: bool = True) -> None:
            """Set a value that must win over the project's and the spider's."""
            if settings.get(name) == value:
                return
            if log:
                changes.append(f"{name}={value!r} (was {settings.get(name)!r})")
            priority = max(SETTINGS_PRIORITIES["addon"], settings.getpriority(name) or 0)
            settings.set(name, value, priority=priority)

        def carry(source: str, target: str) -> None:
            """Keep the user's value of a setting that is about to be switched off."""
            if settings.get(target) is None:
                settings.set(target, settings.get(source), priority="addon")

        for name, path in COMPONENTS.items():
            force(name, path)
        middlewares = settings.getdict("DOWNLOADER_MIDDLEWARES")
        if MIDDLEWARE not in middlewares and OLD_PATHS[MIDDLEWARE] not in middlewares:
            middlewares[MIDDLEWARE] = MIDDLEWARE_PRIORITY
            changes.append(f"DOWNLOADER_MIDDLEWARES += {MIDDLEWARE}: {MIDDLEWARE_PRIORITY}")
        robots = (middlewares.get(p) for p in (ROBOTS_MIDDLEWARE, OLD_PATHS[ROBOTS_MIDDLEWARE]))
        if settings.getbool("ROBOTSTXT_OBEY") and all(priority is None for priority in robots):
            middlewares.update({SCRAPY_ROBOTS_MIDDLEWARE: None, ROBOTS_MIDDLEWARE: 100})
            changes.append(f"DOWNLOADER_MIDDLEWARES: {ROBOTS_MIDDLEWARE} replaces Scrapy's")
        force("DOWNLOADER_MIDDLEWARES", middlewares, log=False)

        carry("DOWNLOAD_DELAY", "AIMD_MIN_DELAY")
        carry("CONCURRENT_REQUESTS_PER_DOMAIN", "AIMD_MAX_CONCURRENCY")
        force("DOWNLOAD_DELAY", 0.0)
        force("AUTOTHROTTLE_ENABLED", False)
        # The downloader must never queue what the scheduler lets start. (An
        # invalid AIMD_MAX_CONCURRENCY is reported, by name, when the crawl starts.)
        limits = [settings.get("CONCURRENT_REQUESTS"), settings.get("AIMD_MAX_CONCURRENCY")]
        per_domain = max((int(v) for v in limits if str(v).isdigit()), default=0)
        if settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN") < per_domain:
            force("CONCURRENT_REQUESTS_PER_DOMAIN", per_domain)
        if settings.getint("CONCURRENT_REQUESTS_PER_IP"):
            force("CONCURRENT_REQUESTS_PER_IP", 0)

        if changes:
            logger.info("scrapy-aimd changed these settings: %s", "; ".join(changes))


def warn_about_downloader_throttling(settings: BaseSettings, default: ControllerConfig) -> None:
    """Warn, when the crawl opens, about what would throttle in the downloader
    and fight the controller (set after the add-on ran, or without it)."""
    if settings.getfloat("DOWNLOAD_DELAY") > 0:
        logger.warning(
            "DOWNLOAD_DELAY=%s also delays every request in the downloader; "
            "use AIMD_MIN_DELAY instead (the scrapy_aimd.Addon does this for you)",
            settings.get("DOWNLOAD_DELAY"),
        )
    per_domain = settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")
    if per_domain < default.max_concurrency:
        logger.warning(
            "CONCURRENT_REQUESTS_PER_DOMAIN=%d is below AIMD_MAX_CONCURRENCY=%d: "
            "the downloader would queue what the scheduler lets start",
            per_domain,
            default.max_concurrency,
        )
    if settings.getbool("AUTOTHROTTLE_ENABLED"):
        logger.warning("AutoThrottle is enabled and will fight scrapy-aimd; disable it")
