"""Read and validate ``AIMD_*`` settings.

Every setting is read once, at startup, through the functions here, so that an
invalid value stops the crawl before it starts with a message that names the
setting and the value, instead of failing deep inside a callback. The functions
take any object with Scrapy's ``Settings.get`` (a plain ``dict`` works too),
so this module does not import Scrapy.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import operator
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

import idna

from scrapy_aimd.core.controller import INT_MINIMUMS, ControllerConfig
from scrapy_aimd.core.hosts import DEFAULT_PORTS, split_host_port

logger = logging.getLogger(__name__)


class SettingsLike(Protocol):
    def get(self, name: str, default: Any = None) -> Any: ...


class AimdSettingsError(ValueError):
    """An ``AIMD_*`` setting has a value that cannot be used."""

    def __init__(self, name: str, value: Any, expected: str) -> None:
        try:
            shown = repr(value)
        except Exception:  # a 5000-digit int, an object whose __repr__ raises
            shown = f"<a {type(value).__name__} that cannot be shown>"
        super().__init__(f"Invalid setting {name}={shown}: expected {expected}")
        self.name = name
        self.value = value


#: The largest whole number a setting may hold: SQLite, arrays and timers take 64 bits.
_INT_MAX = 2**63 - 1


#: A password given as a query parameter (redis-py reads ``?password=``).
_PASSWORD_PARAM = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def masked_url(url: object) -> str:
    """A URL setting's value with its password hidden, for log lines and errors
    (a Redis URL often carries one): what comes before the last ``@`` (but the
    scheme and the user name) and any ``password=`` parameter. Masks too much
    rather than too little: a value that is no URL at all (its repr, if it is no
    string) loses the same."""
    shown = _PASSWORD_PARAM.sub(r"\1***", url if isinstance(url, str) else repr(url))
    scheme, separator, rest = shown.partition("://")
    if not separator:
        scheme, rest = "", shown
    at = rest.rfind("@")
    if at < 0:
        return shown
    user, colon, _ = rest[:at].partition(":")
    userinfo = f"{user}:***" if colon else "***"
    return f"{scheme}{separator}{userinfo}{rest[at:]}"


def read_float(
    settings: SettingsLike,
    name: str,
    default: float | None,
    *,
    minimum: float | None = 0.0,
) -> float:
    """A finite number, at least ``minimum``; strings such as "0.5" are accepted.

    Only numbers and strings: ``float()`` of anything else (or of a huge int,
    a signalling NaN) may raise what is not a settings error."""
    value = settings.get(name, default)
    expected = "a number" if minimum is None else f"a number >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, (int, float, str, numbers.Real)):
        raise AimdSettingsError(name, value, expected)
    try:
        number = float(value)
    except (TypeError, ValueError, ArithmeticError):  # OverflowError: 10**400
        raise AimdSettingsError(name, value, expected) from None
    if not math.isfinite(number) or (minimum is not None and number < minimum):
        raise AimdSettingsError(name, value, expected)
    return number


def read_int(settings: SettingsLike, name: str, default: int, *, minimum: int = 0) -> int:
    """A whole number from ``minimum`` to 2**63 - 1; "3" is accepted, 2.5 and inf are not."""
    value = settings.get(name, default)
    expected = f"a whole number >= {minimum}"
    if isinstance(value, bool):
        raise AimdSettingsError(name, value, expected)
    try:
        if isinstance(value, str):
            number = int(value.strip())  # a 5000-digit string is a ValueError
        elif isinstance(value, numbers.Integral):
            number = operator.index(value)
        elif isinstance(value, numbers.Real):  # float, Fraction
            number = int(float(value))  # inf: OverflowError, nan: ValueError
            if number != value:
                raise ValueError(value)
        else:
            raise TypeError(value)
    except (TypeError, ValueError, ArithmeticError):
        raise AimdSettingsError(name, value, expected) from None
    if number < minimum:
        raise AimdSettingsError(name, value, expected)
    if number > _INT_MAX:
        raise AimdSettingsError(name, value, f"a whole number from {minimum} to {_INT_MAX}")
    return number


_TRUE = {"1", "true", "yes", "on"}
#: Not "": ``-s NAME=`` with the value left out is a mistake, as Scrapy's getbool says.
_FALSE = {"0", "false", "no", "off"}


def read_bool(settings: SettingsLike, name: str, default: bool) -> bool:
    """True/False, 1/0, or their usual spellings as strings (as on the command line)."""
    value = settings.get(name, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = str(value).strip().lower()
        if word in _TRUE | _FALSE:
            return word in _TRUE
    raise AimdSettingsError(name, value, "true or false")


def read_choice(settings: SettingsLike, name: str, default: str, choices: Iterable[str]) -> str:
    """One of a fixed set of strings (a string: an object that only compares equal
    to one is not accepted)."""
    options = tuple(choices)
    value = settings.get(name, default)
    if not isinstance(value, str) or str(value) not in options:
        raise AimdSettingsError(name, value, "one of " + ", ".join(repr(c) for c in options))
    return str(value)


def read_str_list(
    settings: SettingsLike, name: str, default: Iterable[str] = ()
) -> tuple[str, ...]:
    """A list of strings; a comma-separated string is accepted (as from ``-s``).

    A mapping or bytes is not a list of strings; an iterator is read once."""
    value = settings.get(name, None)
    if value is None:
        return tuple(default)
    if isinstance(value, str):
        return tuple(part.strip() for part in str(value).split(",") if part.strip())
    if isinstance(value, Iterable) and not isinstance(value, (bytes, bytearray, Mapping)):
        try:
            items = tuple(value)
        except Exception:  # a user object that fails while iterated
            raise AimdSettingsError(name, value, "a list of strings") from None
        if all(isinstance(item, str) for item in items):
            return tuple(str(item) for item in items)
    raise AimdSettingsError(name, value, "a list of strings")


# -- the reporter's settings ---------------------------------------------------------


def read_summary_rows(settings: SettingsLike) -> int:
    """``AIMD_SUMMARY_ROWS``: the most hosts the end-of-crawl summary lists."""
    from scrapy_aimd.summary import DEFAULT_ROWS

    return read_int(settings, "AIMD_SUMMARY_ROWS", DEFAULT_ROWS, minimum=1)


def read_logstats_interval(settings: SettingsLike) -> float:
    """``AIMD_LOGSTATS_INTERVAL``, else Scrapy's ``LOGSTATS_INTERVAL``: seconds between
    two lines about the hosts (0: none)."""
    if settings.get("AIMD_LOGSTATS_INTERVAL", None) is None:
        return read_float(settings, "LOGSTATS_INTERVAL", 60.0)
    return read_float(settings, "AIMD_LOGSTATS_INTERVAL", None)


# -- the fleet's settings ----------------------------------------------------------

#: Seconds to wait for a reply from the fleet's Redis (``scrapy_aimd.fleet.connection``).
FLEET_REPLY_TIMEOUT = 5.0
#: ``AIMD_FLEET_HEARTBEAT``'s default: seconds a worker's heartbeat key lives unless
#: renewed. It must stay above ``FLEET_REPLY_TIMEOUT``, or a Redis that stalls that
#: long (a BGSAVE fork) expires every worker's together.
FLEET_HEARTBEAT = 10.0


class FleetSettings(NamedTuple):
    """``AIMD_REDIS_URL``, ``AIMD_FLEET_KEY``, ``AIMD_FLEET_IDLE_CLOSE`` and
    ``AIMD_FLEET_HEARTBEAT``, read once."""

    url: str
    key: str
    idle_close: float
    heartbeat: float = FLEET_HEARTBEAT


def read_fleet_settings(settings: SettingsLike, spider: str | None) -> FleetSettings | None:
    """The fleet's settings, None without ``AIMD_REDIS_URL`` (a single process);
    ``spider`` names the default key prefix. Raises ``AimdSettingsError`` naming
    the setting, and refuses ``JOBDIR`` beside a Redis URL."""
    url = settings.get("AIMD_REDIS_URL") or None
    if url is None:
        return None
    if not isinstance(url, str) or "://" not in url:
        raise AimdSettingsError("AIMD_REDIS_URL", masked_url(url), "a redis:// URL")
    if settings.get("JOBDIR"):  # not scrapy's job_dir(), which makes the directory
        raise AimdSettingsError(
            "AIMD_REDIS_URL",
            masked_url(url),
            "no JOBDIR with it: a fleet's durability is Redis's own (AOF or RDB, see "
            "docs/fleet.rst); unset JOBDIR or AIMD_REDIS_URL",
        )
    key = settings.get("AIMD_FLEET_KEY") or f"aimd:{spider or 'spider'}"
    if not isinstance(key, str) or any(c.isspace() for c in key):
        raise AimdSettingsError("AIMD_FLEET_KEY", key, "a Redis key prefix without spaces")
    idle_close = read_float(settings, "AIMD_FLEET_IDLE_CLOSE", 5.0)
    heartbeat = read_float(settings, "AIMD_FLEET_HEARTBEAT", FLEET_HEARTBEAT)
    if heartbeat <= FLEET_REPLY_TIMEOUT:
        # A Redis that stalls for a reply timeout (a BGSAVE fork, an AOF rewrite)
        # would expire every worker's heartbeat together.
        raise AimdSettingsError(
            "AIMD_FLEET_HEARTBEAT",
            settings.get("AIMD_FLEET_HEARTBEAT"),
            f"seconds above the fleet's Redis reply timeout ({FLEET_REPLY_TIMEOUT:g}s): a "
            "Redis stall that long would take every worker for dead",
        )
    return FleetSettings(url, key, idle_close, heartbeat)


# -- the controller's settings -----------------------------------------------------

#: Setting name -> ControllerConfig field, for every field.
_CONTROLLER_FIELDS: dict[str, str] = {
    "AIMD_MIN_DELAY": "min_delay",
    "AIMD_MAX_DELAY": "max_delay",
    "AIMD_MAX_CONCURRENCY": "max_concurrency",
    "AIMD_ADAPTIVE_CONCURRENCY": "adaptive",
    "AIMD_FAST_LATENCY": "fast_latency",
    "AIMD_LATENCY_FACTOR": "latency_factor",
    "AIMD_THROTTLE_CODES": "throttle_codes",
    "AIMD_MAX_RETRY_AFTER": "max_retry_after",
    "AIMD_BLOCK_CODES": "block_codes",
}

#: Settings of the controller's internals that were removed (the controller now
#: measures what they tuned): a project that still sets one is warned, not stopped.
REMOVED_CONTROLLER_SETTINGS: dict[str, str] = {
    "AIMD_RECOVERY": "recovery",
    "AIMD_MARGIN": "margin",
    "AIMD_PROBE_TIME": "probe_time",
    "AIMD_APPROACH_TIME": "approach_time",
    "AIMD_PROBE_REQUESTS": "probe_requests",
    "AIMD_INITIAL_BACKOFF": "initial_backoff",
    "AIMD_LATENCY_WINDOW": "latency_window",
    "AIMD_PACE_WINDOW": "pace_window",
    "AIMD_PACE_SAMPLES": "pace_samples",
}

#: Every setting :func:`controller_configs` reads (the docs list the same).
CONTROLLER_SETTINGS: tuple[str, ...] = (*_CONTROLLER_FIELDS, "AIMD_HOSTS")


class HostConfigs:
    """The controller config of every host: the defaults, with ``AIMD_HOSTS`` on top.

    An override for ``example.com`` applies to example.com and its subdomains, on
    any port; one for ``example.com:8080`` to that port only. The longest matching
    key wins. Hosts are the scheduler's host keys: lowercase, ``host`` or
    ``host:port``, or the ``download_slot`` a user set.

    ``slots`` are the entries carried from ``DOWNLOAD_SLOTS``: as in Scrapy, each
    applies to its own slot only, the requests whose ``download_slot`` is that
    key, or whose host name (Scrapy's slot for a URL) is, on any port; never to
    subdomains.
    """

    def __init__(
        self,
        default: ControllerConfig,
        overrides: dict[str, ControllerConfig],
        slots: dict[str, ControllerConfig] | None = None,
    ) -> None:
        self.default = default
        self.overrides = dict(overrides)
        self.slots = dict(slots or {})
        self._cache: dict[str, ControllerConfig] = {}

    def for_host(self, host: str) -> ControllerConfig:
        """The config for a host (cached: this is asked for every response)."""
        if not self.overrides and not self.slots:
            return self.default
        cfg = self._cache.get(host)
        if cfg is None:
            cfg = self._cache[host] = self._match(host)
        return cfg

    def _match(self, host: str) -> ControllerConfig:
        name, port = _split_port(host)
        candidates = [name] if not port else [f"{name}:{port}", name]
        best: str | None = None
        for candidate in candidates:
            for key in _suffixes(candidate):
                if key in self.overrides and (best is None or len(key) > len(best)):
                    best = key
        slot = self._slot(host, name, port)
        if slot is not None and (best is None or len(slot[0]) >= len(best)):
            return slot[1]
        return self.default if best is None else self.overrides[best]

    def _slot(self, host: str, name: str, port: str) -> tuple[str, ControllerConfig] | None:
        """The ``DOWNLOAD_SLOTS`` entry of this host, with the host key it stands for:
        the host itself (a slot the user set), else its name without the port, as
        Scrapy keys a URL's slot (an IPv6 address without its brackets)."""
        if not self.slots:
            return None
        if host in self.slots:
            return host, self.slots[host]
        if port.isdigit() and name in self.slots:
            return name, self.slots[name]
        if name.startswith("[") and name.endswith("]") and name[1:-1] in self.slots:
            return name, self.slots[name[1:-1]]
        return None


def controller_configs(settings: SettingsLike) -> HostConfigs:
    """Read every controller setting; raise :class:`AimdSettingsError` naming the
    setting and the value at the first one that cannot be used.

    This module only parses (a number, a whole number, a bool, status codes):
    which values the controller accepts, :class:`ControllerConfig` says itself.
    """
    given: dict[str, _Given] = {}
    sources = _read_carried_settings(settings)
    for name, field_name in _CONTROLLER_FIELDS.items():
        default = _default(settings, name)
        raw = settings.get(name, default)
        given[field_name] = _given_field(sources.get(name, name), field_name, raw)
    names = {field_name: g.name for field_name, g in given.items()}
    default = _config({}, given, names)
    overrides: dict[str, ControllerConfig] = {}
    slots: dict[str, ControllerConfig] = {}
    base = {field_name: g.value for field_name, g in given.items()}
    carried = _read_carried_slots(settings)
    for key, fields_ in _read_hosts(settings, carried).items():
        from_slot = carried.get(key, {})
        host_given = {
            field_name: _given_field(
                f"DOWNLOAD_SLOTS[{key!r}].{from_slot[field_name]}"
                if field_name in from_slot
                else f"AIMD_HOSTS[{key!r}].{field_name}",
                field_name,
                raw,
            )
            for field_name, raw in fields_.items()
        }
        host_names = {**names, **{f: g.name for f, g in host_given.items()}}
        if from_slot:
            slots[str(key)] = _config(base, host_given, host_names)
        own = {f: g for f, g in host_given.items() if f not in from_slot}
        if from_slot and not own:
            continue
        host = _host_key(key)
        if host in overrides:
            raise AimdSettingsError("AIMD_HOSTS", key, f"one entry per host ({host!r} twice)")
        overrides[host] = _config(base, own, host_names)
    return HostConfigs(default, overrides, slots)


def _given_field(name: str, field_name: str, raw: Any) -> _Given:
    """A field of an AIMD_HOSTS entry, parsed, under the name of the setting that gave it."""
    return _Given(name, raw, _read_field({name: raw}, name, field_name, None))


#: Where the add-on says which fields of AIMD_HOSTS it carried from ``DOWNLOAD_SLOTS``:
#: ``{slot key: {field: the slot's own name of it}}``. Those fields apply to their
#: slot only (:class:`HostConfigs`), and an error in one names ``DOWNLOAD_SLOTS``.
#: Not an ``AIMD_*`` setting: the add-on writes it, a user never does.
CARRIED_SLOTS = "_AIMD_CARRIED_DOWNLOAD_SLOTS"


#: Where the add-on says which settings it carried into controller settings:
#: ``{"AIMD_MIN_DELAY": "DOWNLOAD_DELAY"}``, or ``"the spider's download_delay"``.
#: An error in a carried value names what the user set, not a setting they never
#: wrote. Not an ``AIMD_*`` setting: the add-on writes it, a user never does.
CARRIED_SETTINGS = "_AIMD_CARRIED_SETTINGS"


def _read_carried_settings(settings: SettingsLike) -> dict[str, str]:
    value = settings.get(CARRIED_SETTINGS, None)
    if not isinstance(value, Mapping):
        return {}
    return {str(target): str(source) for target, source in value.items()}


def _read_carried_slots(settings: SettingsLike) -> dict[Any, dict[str, str]]:
    value = settings.get(CARRIED_SLOTS, None)
    if not isinstance(value, Mapping):
        return {}
    return {key: dict(fields_) for key, fields_ in value.items() if isinstance(fields_, Mapping)}


class _Given(NamedTuple):
    """A controller field as a setting gave it: the setting's name, its raw value, parsed."""

    name: str
    raw: Any
    value: Any


#: The order in which fields are tried when the config refuses them: min_delay after
#: max_delay, so that "above max_delay" blames min_delay against the given max_delay.
_CHECK_ORDER = sorted(_CONTROLLER_FIELDS.values(), key=lambda field_name: field_name == "min_delay")


def _config(
    base: dict[str, Any], given: dict[str, _Given], names: dict[str, str]
) -> ControllerConfig:
    """``ControllerConfig(**base, **given)``; the config's own ``ValueError`` becomes an
    :class:`AimdSettingsError` naming the first setting that it refuses (``names``:
    field -> setting, to say the config's message in the settings' words)."""
    try:
        return ControllerConfig(**{**base, **{f: g.value for f, g in given.items()}})
    except ValueError:
        pass
    checked = dict(base)
    for field_name in _CHECK_ORDER:
        if field_name not in given:
            continue
        this = given[field_name]
        checked[field_name] = this.value
        try:
            ControllerConfig(**checked)
        except ValueError as exc:
            detail = re.sub(r"\b\w+\b", lambda m: names.get(m[0], m[0]), str(exc))
            expected = (
                detail.partition(": expected ")[2] or f"a value the controller accepts: {detail}"
            )
            raise AimdSettingsError(this.name, this.raw, expected) from None
    raise AssertionError("unreachable: each field alone was accepted")  # pragma: no cover


def _default(settings: SettingsLike, name: str) -> Any:
    if name == "AIMD_MIN_DELAY":
        return read_float(settings, "DOWNLOAD_DELAY", 0.0)
    if name == "AIMD_MAX_CONCURRENCY":
        return read_int(settings, "CONCURRENT_REQUESTS_PER_DOMAIN", 8, minimum=1)
    return getattr(_DEFAULT_CONFIG, _CONTROLLER_FIELDS[name])


def _read_field(settings: SettingsLike, name: str, field_name: str, default: Any) -> Any:
    """Parse a field's setting by the field's type; its bounds are the config's to check."""
    kind = type(getattr(_DEFAULT_CONFIG, field_name))
    if kind is bool:
        return read_bool(settings, name, default)
    if kind is frozenset:
        return read_status_codes(settings, name, default)
    if kind is int:
        return read_int(settings, name, default, minimum=INT_MINIMUMS[field_name])
    return read_float(settings, name, default, minimum=None)


def read_status_codes(settings: SettingsLike, name: str, default: Iterable[int]) -> frozenset[int]:
    """HTTP status codes: a list, or a string such as "429,503" or "[429, 503]"."""
    value = settings.get(name, None)
    if value is None:
        return frozenset(default)
    expected = "a list of HTTP status codes (100-599)"
    if isinstance(value, str):
        items: Iterable[Any] = value.strip().strip("[]").replace(",", " ").split()
    elif isinstance(value, Iterable):
        items = value
    else:
        raise AimdSettingsError(name, value, expected)
    codes = set()
    for item in items:
        if isinstance(item, bool):
            raise AimdSettingsError(name, value, expected)
        try:
            code = int(item)
        except (TypeError, ValueError):
            raise AimdSettingsError(name, value, expected) from None
        if code != item and str(code) != str(item).strip():
            raise AimdSettingsError(name, value, expected)
        codes.add(code)
    return frozenset(codes)


def _read_hosts(
    settings: SettingsLike, carried: Mapping[Any, Mapping[str, str]] | None = None
) -> dict[Any, dict[str, Any]]:
    """AIMD_HOSTS: host -> {field: value}, as a dict or a JSON string (from ``-s``).

    An entry whose every field was carried from ``DOWNLOAD_SLOTS`` is keyed by a
    slot, which Scrapy lets be any string: its key need not be a host."""
    carried = carried or {}
    value = settings.get("AIMD_HOSTS", None)
    if value is None or value == "":
        return {}
    expected = 'a dict of host -> {field: value}, e.g. {"example.com": {"max_concurrency": 2}}'
    hosts = value
    if isinstance(value, str):
        try:
            hosts = json.loads(value)
        except ValueError:
            raise AimdSettingsError("AIMD_HOSTS", value, expected) from None
    if not isinstance(hosts, Mapping):
        raise AimdSettingsError("AIMD_HOSTS", value, expected)
    known = sorted(_CONTROLLER_FIELDS.values())
    result: dict[Any, dict[str, Any]] = {}
    for key, fields_ in hosts.items():
        from_slot = carried.get(key, {})
        if isinstance(fields_, Mapping) and from_slot and set(fields_) <= set(from_slot):
            result[key] = dict(fields_)
            continue
        if not isinstance(key, str) or not _HOST_KEY.fullmatch(key.strip()):
            expected_key = f"host keys such as 'example.com' or 'localhost:8080', not {key!r}"
            raise AimdSettingsError("AIMD_HOSTS", value, expected_key)
        if not isinstance(fields_, Mapping):
            raise AimdSettingsError(f"AIMD_HOSTS[{key!r}]", fields_, expected)
        removed = set(REMOVED_CONTROLLER_SETTINGS.values())
        for field_name in [f for f in fields_ if f in removed]:
            logger.warning(
                "AIMD_HOSTS[%r].%s was removed and is ignored: the controller measures it",
                key,
                field_name,
            )
        fields_ = {f: v for f, v in fields_.items() if f not in removed}
        for field_name in fields_:
            if field_name not in known:
                raise AimdSettingsError(
                    f"AIMD_HOSTS[{key!r}]", field_name, "one of " + ", ".join(known)
                )
        result[key] = dict(fields_)
    return result


#: Ports dropped from an AIMD_HOSTS key: a request URL's host key never has them.
_WEB_DEFAULT_PORTS = frozenset(str(DEFAULT_PORTS[scheme]) for scheme in ("http", "https"))

_HOST_KEY = re.compile(r"(\[[0-9a-fA-F:.]+\]|[^\s/:@\[\]?#]+)(:\d+)?")


def _host_key(key: str) -> str:
    """As the scheduler's host keys are: lowercase, no trailing dot, no default port
    (80 or 443: a key without a port applies to every port anyway), international
    names in the IDNA form that request URLs carry."""
    name, port = _split_port(key.strip().lower())
    name = name.rstrip(".")
    if port in _WEB_DEFAULT_PORTS:
        port = ""
    if not name.isascii():
        try:
            name = idna.encode(name, uts46=True).decode("ascii")
        except idna.IDNAError:
            raise AimdSettingsError("AIMD_HOSTS", key, "a valid host name") from None
    return f"{name}:{port}" if port else name


def _split_port(host: str) -> tuple[str, str]:
    """A host key's name and port ("" when it has none)."""
    return split_host_port(host) or (host, "")


def _suffixes(name: str) -> Iterator[str]:
    """example.com:8080 -> itself, com:8080; www.example.com -> itself, example.com, com."""
    yield name
    if name.startswith("["):
        return
    while "." in name:
        name = name.partition(".")[2]
        yield name


_DEFAULT_CONFIG = ControllerConfig()
