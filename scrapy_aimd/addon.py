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

import difflib
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from scrapy.settings import SETTINGS_PRIORITIES

from scrapy_aimd.settings import (
    CARRIED_SETTINGS,
    CARRIED_SLOTS,
    REMOVED_CONTROLLER_SETTINGS,
    AimdSettingsError,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from typing_extensions import Self

    from scrapy_aimd.core.controller import ControllerConfig

logger = logging.getLogger(__name__)

MIDDLEWARE = "scrapy_aimd.feedback_middleware.AimdDownloaderMiddleware"
MIDDLEWARE_PRIORITY = 950
ROBOTS_MIDDLEWARE = "scrapy_aimd.robots_middleware.RobotsTxtMiddleware"
SCRAPY_ROBOTS_MIDDLEWARE = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
#: AutoThrottle's settings, which the add-on turns off with AutoThrottle, and
#: the nearest setting of the add-on's (docs/migrating.rst).
AUTOTHROTTLE_NEAREST = {
    "AUTOTHROTTLE_START_DELAY": "AIMD_MIN_DELAY",
    "AUTOTHROTTLE_MAX_DELAY": "AIMD_MAX_DELAY",
    "AUTOTHROTTLE_TARGET_CONCURRENCY": "AIMD_MAX_CONCURRENCY",
    "AUTOTHROTTLE_DEBUG": "AIMD_EVENTS_FILE",
}
COMPONENTS = {
    "SCHEDULER": "scrapy_aimd.scheduler.AimdScheduler",
    "REQUEST_FINGERPRINTER_CLASS": "scrapy_aimd.fingerprint.AimdRequestFingerprinter",
    "DUPEFILTER_CLASS": "scrapy_aimd.dupefilter.AimdDupeFilter",
}


class Addon:
    """Enables scrapy-aimd in a Scrapy project or spider.

    Scrapy builds add-ons with ``from_crawler`` once the spider exists, so the
    spider's own ``download_delay`` and ``max_concurrent_requests`` attributes
    are read here too (Scrapy would otherwise apply them to the downloader after
    the add-ons ran, where they would throttle on top of the controller).
    """

    def __init__(self, crawler: Crawler | None = None) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def update_settings(self, settings: BaseSettings) -> None:
        changes: list[str] = []

        def force(name: str, value: Any, *, log: bool = True, floor: str = "addon") -> None:
            """Set a value that must win over the project's and the spider's."""
            priority = max(SETTINGS_PRIORITIES[floor], settings.getpriority(name) or 0)
            if settings.get(name) == value:
                if priority > (settings.getpriority(name) or 0):
                    settings.set(name, value, priority=priority)
                return
            if log:
                changes.append(f"{name}={value!r} (was {settings.get(name)!r})")
            settings.set(name, value, priority=priority)

        _check_components(settings, force)
        middlewares = settings.getdict("DOWNLOADER_MIDDLEWARES")
        if MIDDLEWARE not in middlewares:
            middlewares[MIDDLEWARE] = MIDDLEWARE_PRIORITY
            changes.append(f"DOWNLOADER_MIDDLEWARES += {MIDDLEWARE}: {MIDDLEWARE_PRIORITY}")
        if settings.getbool("ROBOTSTXT_OBEY") and middlewares.get(ROBOTS_MIDDLEWARE) is None:
            middlewares.update({SCRAPY_ROBOTS_MIDDLEWARE: None, ROBOTS_MIDDLEWARE: 100})
            changes.append(f"DOWNLOADER_MIDDLEWARES: {ROBOTS_MIDDLEWARE} replaces Scrapy's")
        force("DOWNLOADER_MIDDLEWARES", middlewares, log=False)

        spider: object = None
        if self.crawler is not None:
            spider = self.crawler.spider or self.crawler.spidercls
        _warn_about_startproject_pace(settings, spider)
        delay = _carry(settings, "DOWNLOAD_DELAY", "download_delay", spider, "AIMD_MIN_DELAY")
        if delay:
            changes.append(f"{delay} (the downloader's own delay is now 0)")
        lifted = _lift_max_delay(settings)
        if lifted:
            changes.append(lifted)
        # At spider priority: Scrapy puts a spider's download_delay there otherwise.
        force("DOWNLOAD_DELAY", 0.0, log=False, floor="spider")
        force("AUTOTHROTTLE_ENABLED", False)
        for name, nearest in AUTOTHROTTLE_NEAREST.items():
            if (settings.getpriority(name) or 0) > SETTINGS_PRIORITIES["default"]:
                changes.append(f"{name}={settings.get(name)} is not used (the nearest: {nearest})")
        changes.extend(_carry_download_slots(settings, force))
        per_ip = settings.getint("CONCURRENT_REQUESTS_PER_IP")
        if per_ip:
            # Scrapy's downloader puts it above the per-domain limit (and the
            # spider's max_concurrent_requests); it is set to 0 below.
            per_domain_from = _carry(
                settings, "CONCURRENT_REQUESTS_PER_IP", "", None, "AIMD_MAX_CONCURRENCY"
            )
        else:
            per_domain_from = _carry(
                settings,
                "CONCURRENT_REQUESTS_PER_DOMAIN",
                "max_concurrent_requests",
                spider,
                "AIMD_MAX_CONCURRENCY",
            )
        # The downloader must never queue what the scheduler lets start. (An
        # invalid AIMD_MAX_CONCURRENCY, or one carried, is reported by name when
        # the crawl starts.)
        limits = [
            settings.get(name)
            for name in (
                "CONCURRENT_REQUESTS",
                "AIMD_MAX_CONCURRENCY",
                "CONCURRENT_REQUESTS_PER_DOMAIN",
            )
        ]
        per_domain = max((n for n in map(_whole, limits) if n is not None), default=0)
        was = settings.get("CONCURRENT_REQUESTS_PER_DOMAIN")
        force("CONCURRENT_REQUESTS_PER_DOMAIN", per_domain, log=False, floor="spider")
        if per_domain_from:
            changes.append(
                f"{per_domain_from} (the downloader's own per-domain limit is now "
                f"{per_domain}, so that it never holds back what the scheduler lets start)"
            )
        elif str(was) != str(per_domain):
            changes.append(
                f"CONCURRENT_REQUESTS_PER_DOMAIN={per_domain} (was {was!r}: the downloader's "
                "own per-domain limit never holds back what the scheduler lets start)"
            )
        if per_ip:
            force("CONCURRENT_REQUESTS_PER_IP", 0)
        command = _one_page_command(settings, spider)
        given = settings.getpriority("AIMD_EVENTS_FILE") or 0
        if command and settings.get("AIMD_EVENTS_FILE") and given < SETTINGS_PRIORITIES["cmdline"]:
            changes.append(f"AIMD_EVENTS_FILE=None under {command} (the crawl's file is kept)")
            settings.set("AIMD_EVENTS_FILE", None, priority="cmdline")
        warn_about_unknown_settings(settings)

        if changes:
            logger.info("scrapy-aimd changed these settings: %s", "; ".join(changes))


def _warn_about_startproject_pace(settings: BaseSettings, spider: object) -> None:
    """The two lines that ``scrapy startproject`` writes into settings.py hold
    every host to one request a second once carried, whatever it can take: say
    so where a new user looks, unless the spider or the AIMD_* settings decide."""
    project = SETTINGS_PRIORITIES["project"]
    if any(
        settings.getpriority(name) != project or str(settings.get(name)) not in ("1", "1.0")
        for name in ("DOWNLOAD_DELAY", "CONCURRENT_REQUESTS_PER_DOMAIN")
    ):
        return
    if (
        settings.get("AIMD_MIN_DELAY") is not None
        or settings.get("AIMD_MAX_CONCURRENCY") is not None
    ):
        return
    if any(
        getattr(spider, a, None) is not None for a in ("download_delay", "max_concurrent_requests")
    ):
        return
    logger.warning(
        "DOWNLOAD_DELAY=1 and CONCURRENT_REQUESTS_PER_DOMAIN=1, as scrapy startproject "
        "writes them, hold every host to one request at a time, a second apart, "
        "whatever it can take: delete both lines from settings.py to let scrapy-aimd "
        "find each host's pace, or set AIMD_MIN_DELAY and AIMD_MAX_CONCURRENCY to keep it"
    )


def _whole(value: object) -> int | None:
    """A limit written as a whole number a setting can hold, else None (an invalid
    one is named at start, by the setting that holds it)."""
    text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    if not text.isdigit() or len(text) > 19:
        return None
    number = int(text)
    return number if number < 2**63 else None


def _lift_max_delay(settings: BaseSettings) -> str | None:
    """A floor (a carried DOWNLOAD_DELAY) above the default ceiling of the gap
    raises the ceiling to it: Scrapy takes any delay. A ceiling the user set
    stays, and a floor above it is an error named at start."""
    if settings.get("AIMD_MAX_DELAY") is not None:
        return None
    try:
        floor = float(settings.get("AIMD_MIN_DELAY"))
    except (TypeError, ValueError, ArithmeticError):  # OverflowError: 10**400
        return None  # an invalid value is named at start
    from scrapy_aimd.core.controller import ControllerConfig

    default = ControllerConfig().max_delay
    if not default < floor < float("inf"):
        return None
    settings.set("AIMD_MAX_DELAY", floor, priority="addon")
    return f"AIMD_MAX_DELAY={floor} (was {default}, below AIMD_MIN_DELAY)"


def _carry(
    settings: BaseSettings, source: str, attribute: str, spider: object, target: str
) -> str | None:
    """Carry the user's ``source`` (or the spider's ``attribute``, which Scrapy puts
    above it) into ``target`` unless the user set ``target`` at the same priority
    or above (settings.py's AIMD_MIN_DELAY does not undo a spider's or the command
    line's DOWNLOAD_DELAY); say where it went."""
    value, named = settings.get(source), source
    priority = settings.getpriority(source) or 0
    attr = getattr(spider, attribute, None) if spider is not None else None
    if attr is not None and priority < SETTINGS_PRIORITIES["spider"]:
        value, named, priority = attr, f"the spider's {attribute}", SETTINGS_PRIORITIES["spider"]
    if priority <= SETTINGS_PRIORITIES["default"]:
        if settings.get(target) is None:
            settings.set(target, value, priority="addon")
        return None
    given = settings.get(target)
    given_priority = settings.getpriority(target) or 0
    overridden = given is not None and given_priority > SETTINGS_PRIORITIES["addon"]
    if overridden and given_priority >= priority:
        return f"{named}={value} is not used: {target}={given} is set"
    settings.set(target, value, priority=max(priority, SETTINGS_PRIORITIES["addon"]))
    # An invalid value is reported under the name the user gave it.
    carried = settings.get(CARRIED_SETTINGS)
    sources = dict(carried) if isinstance(carried, Mapping) else {}
    settings.set(CARRIED_SETTINGS, {**sources, target: named}, priority="addon")
    below = f", over {target}={given} given at a lower priority" if overridden else ""
    return f"{named}={value} → {target}={value}{below}"


def _carry_download_slots(settings: BaseSettings, force: Callable[..., None]) -> list[str]:
    """``DOWNLOAD_SLOTS`` delays and concurrencies feed the controller of that slot (as
    :setting:`AIMD_HOSTS` entries; the user's own AIMD_HOSTS entries win), and the
    downloader's own delay of each slot becomes 0.

    Which fields came from a slot is recorded (``CARRIED_SLOTS``): they apply to
    that slot only, as in Scrapy, not to its subdomains, and its key may be any
    string, as Scrapy's slot keys may."""
    try:
        slots = settings.getdict("DOWNLOAD_SLOTS")
        hosts = settings.getdict("AIMD_HOSTS")
    except (TypeError, ValueError):
        return []  # an invalid AIMD_HOSTS is named when the crawl starts
    changes: list[str] = []
    carried: dict[str, Any] = {}
    from_slots: dict[str, dict[str, str]] = {}
    for key, slot in slots.items():
        if not isinstance(slot, dict):
            continue
        own = hosts.get(key)
        entry = dict(own) if isinstance(own, dict) else {}
        for name, field_name in (("delay", "min_delay"), ("concurrency", "max_concurrency")):
            if slot.get(name) is None:
                continue
            if field_name in entry:
                changes.append(
                    f"DOWNLOAD_SLOTS[{key!r}].{name}={slot[name]} is not used: "
                    f"AIMD_HOSTS[{key!r}].{field_name}={entry[field_name]} is set"
                )
                continue
            entry[field_name] = slot[name]
            from_slots.setdefault(key, {})[field_name] = name
            changes.append(
                f"DOWNLOAD_SLOTS[{key!r}].{name}={slot[name]} → "
                f"AIMD_HOSTS[{key!r}].{field_name}={slot[name]}, for that slot only"
                + (" (the downloader's own delay of that slot is now 0)" if name == "delay" else "")
            )
        if entry:
            carried[key] = entry
    if not carried:
        return changes
    zeroed = {
        key: ({**slot, "delay": 0.0} if isinstance(slot, dict) and "delay" in slot else slot)
        for key, slot in slots.items()
    }
    force("DOWNLOAD_SLOTS", zeroed, log=False, floor="spider")
    force("AIMD_HOSTS", {**hosts, **carried}, log=False)
    force(CARRIED_SLOTS, from_slots, log=False)
    return changes


#: Scrapy's own components that the add-on replaces without asking.
SCRAPY_DEFAULTS = {
    "SCHEDULER": "scrapy.core.scheduler.Scheduler",
    "REQUEST_FINGERPRINTER_CLASS": "scrapy.utils.request.RequestFingerprinter",
    "DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter",
}
#: What a user's own fingerprinter or duplicate filter costs.
KEPT_COST = {
    "REQUEST_FINGERPRINTER_CLASS": (
        "duplicates are found by its fingerprints, not by the canonical URL: "
        "tracking parameters and other variants of a page are fetched again"
    ),
    "DUPEFILTER_CLASS": (
        "the duplicate filter is not scrapy-aimd's: its memory per URL, and whether "
        "a JOBDIR keeps its seen set across a crash, are that filter's"
    ),
}


def _check_components(settings: BaseSettings, force: Callable[..., None]) -> None:
    """Set the components; keep a fingerprinter or duplicate filter the user chose
    (with a warning) or a command chose (``scrapy shell`` sets its own duplicate
    filter), and refuse a scheduler other than ours."""
    for name, path in COMPONENTS.items():
        given = settings.get(name)
        chosen = _chosen(settings, name, path)
        if chosen is None:
            force(name, path)
        elif name == "SCHEDULER":
            raise AimdSettingsError(
                name,
                _path(given),
                f"{path} (or a subclass): scrapy-aimd does its work in its scheduler and "
                f"cannot run under {_path(given)}; remove SCHEDULER or the add-on",
            )
        elif chosen == "user":
            logger.warning(
                "scrapy-aimd keeps %s=%s, set in the settings: %s",
                name,
                _path(given),
                KEPT_COST[name],
            )


def _chosen(settings: BaseSettings, name: str, ours: str) -> str | None:
    """Who chose a component of their own ("user" or "command"), None when the
    setting is Scrapy's default or ours."""
    given = settings.get(name)
    if given is None or _path(given) in (ours, SCRAPY_DEFAULTS[name]):
        return None
    priority = settings.getpriority(name) or 0
    if priority <= SETTINGS_PRIORITIES["addon"] and name != "SCHEDULER":
        return "command" if priority >= SETTINGS_PRIORITIES["command"] else None
    if name == "SCHEDULER" and _is_ours(given):
        return None
    return "user"


def _is_ours(component: object) -> bool:
    """A scheduler given as AimdScheduler or a subclass of it (by path: the scheduler
    module imports this one)."""
    from scrapy.utils.misc import load_object

    try:
        cls = load_object(component) if isinstance(component, str) else component
    except (ImportError, NameError, ValueError, AttributeError):
        return False
    mro = getattr(cls, "__mro__", ())
    return any(f"{c.__module__}.{c.__qualname__}" == COMPONENTS["SCHEDULER"] for c in mro)


#: Scrapy's commands that replace a spider's ``start`` with their own, by the
#: module that defines it: they crawl a page or a contract, not the project's crawl.
_START_OF_COMMAND = {
    "scrapy.commands.fetch": "scrapy fetch",
    "scrapy.commands.parse": "scrapy parse",
    "scrapy.commands.check": "scrapy check",
}


def _one_page_command(settings: BaseSettings, spider: object) -> str | None:
    """``scrapy fetch``, ``shell``, ``parse``, ``check`` or ``bench``: commands that
    fetch a page or two (or run Scrapy's benchmark) with the project's settings,
    and must not overwrite the project's events file."""
    cls = spider if isinstance(spider, type) else type(spider)
    start_module = getattr(getattr(cls, "start", None), "__module__", None)
    if start_module in _START_OF_COMMAND:
        return _START_OF_COMMAND[start_module]
    if getattr(cls, "__module__", None) == "scrapy.commands.bench":
        return "scrapy bench"
    if settings.get("DUPEFILTER_CLASS") == "scrapy.dupefilters.BaseDupeFilter" and (
        settings.getpriority("DUPEFILTER_CLASS") == SETTINGS_PRIORITIES["command"]
    ):
        return "scrapy shell"
    return None


def _path(value: object) -> str:
    """A component as its import path, whether given as a path or as the class."""
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return str(value)


# -- misspelled settings ----------------------------------------------------------------

#: Settings that were removed, and what replaced them.
REMOVED_SETTINGS = {
    "AIMD_DELAY_STEP": "the gap now closes by what the host accepted, in logarithmic time",
    **{
        name: "the controller now measures what it tuned, and it is ignored"
        for name in REMOVED_CONTROLLER_SETTINGS
    },
}
#: The fleet's settings (docs/fleet.rst), read by scrapy_aimd.fleet.
FLEET_SETTINGS = (
    "AIMD_REDIS_URL",
    "AIMD_FLEET_KEY",
    "AIMD_FLEET_IDLE_CLOSE",
    "AIMD_FLEET_HEARTBEAT",
)
#: Settings read outside the modules that export their lists.
OTHER_SETTINGS = (
    "AIMD_EVENTS_FILE",
    "AIMD_THROTTLE_RETRIES",
    "AIMD_SHUTDOWN_GRACE",
    "AIMD_HOST_GIVE_UP",
    "AIMD_SUMMARY_ROWS",
    "AIMD_LOGSTATS_INTERVAL",
)


def known_settings() -> frozenset[str]:
    """Every ``AIMD_*`` setting that scrapy-aimd reads, from the modules that read them."""
    from scrapy_aimd.fingerprint import CANONICAL_SETTINGS
    from scrapy_aimd.robots_middleware import ROBOTS_SETTINGS
    from scrapy_aimd.settings import CONTROLLER_SETTINGS

    return frozenset(
        (
            *CONTROLLER_SETTINGS,
            *CANONICAL_SETTINGS,
            *ROBOTS_SETTINGS,
            *FLEET_SETTINGS,
            *OTHER_SETTINGS,
        )
    )


def warn_about_unknown_settings(settings: BaseSettings) -> None:
    """One WARNING per ``AIMD_*`` setting nothing reads, naming the closest known one:
    a misspelled setting would otherwise be silently ignored."""
    known = known_settings()
    for name in sorted(str(n) for n in settings if str(n).startswith("AIMD_")):
        if name in known:
            continue
        if name in REMOVED_SETTINGS:
            logger.warning("%s was removed: %s", name, REMOVED_SETTINGS[name])
            continue
        # By what follows the prefix: every name shares "AIMD_".
        close = difflib.get_close_matches(name[5:], [k[5:] for k in known], n=1, cutoff=0.6)
        hint = f"; did you mean AIMD_{close[0]}?" if close else ""
        logger.warning("Unknown setting %s is ignored%s", name, hint)


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
