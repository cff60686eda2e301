"""Read and validate ``AIMD_*`` settings.

Every setting is read once, at startup, through the functions here, so that an
invalid value stops the crawl before it starts with a message that names the
setting and the value, instead of failing deep inside a callback. The functions
take any object with Scrapy's ``Settings.get`` (a plain ``dict`` works too),
so this module does not import Scrapy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol


class SettingsLike(Protocol):
    def get(self, name: str, default: Any = None) -> Any: ...


class AimdSettingsError(ValueError):
    """An ``AIMD_*`` setting has a value that cannot be used."""

    def __init__(self, name: str, value: Any, expected: str) -> None:
        super().__init__(f"Invalid setting {name}={value!r}: expected {expected}")
        self.name = name
        self.value = value


def read_float(
    settings: SettingsLike,
    name: str,
    default: float | None,
    *,
    minimum: float | None = 0.0,
) -> float:
    """A finite number, at least ``minimum``; strings such as "0.5" are accepted."""
    value = settings.get(name, default)
    expected = "a number" if minimum is None else f"a number >= {minimum}"
    if isinstance(value, bool):
        raise AimdSettingsError(name, value, expected)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise AimdSettingsError(name, value, expected) from None
    if not math.isfinite(number) or (minimum is not None and number < minimum):
        raise AimdSettingsError(name, value, expected)
    return number


def read_int(settings: SettingsLike, name: str, default: int, *, minimum: int = 0) -> int:
    """A whole number, at least ``minimum``; "3" is accepted, 2.5 is not."""
    value = settings.get(name, default)
    expected = f"a whole number >= {minimum}"
    if isinstance(value, bool):
        raise AimdSettingsError(name, value, expected)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise AimdSettingsError(name, value, expected) from None
    if isinstance(value, float) and value != number:
        raise AimdSettingsError(name, value, expected)
    if number < minimum:
        raise AimdSettingsError(name, value, expected)
    return number


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def read_bool(settings: SettingsLike, name: str, default: bool) -> bool:
    """True/False, 1/0, or their usual spellings as strings (as on the command line)."""
    value = settings.get(name, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise AimdSettingsError(name, value, "true or false")


def read_choice(settings: SettingsLike, name: str, default: str, choices: Iterable[str]) -> str:
    """One of a fixed set of strings."""
    options = tuple(choices)
    value = settings.get(name, default)
    if value not in options:
        raise AimdSettingsError(name, value, "one of " + ", ".join(repr(c) for c in options))
    return str(value)


def read_str_list(
    settings: SettingsLike, name: str, default: Iterable[str] = ()
) -> tuple[str, ...]:
    """A list of strings; a comma-separated string is accepted (as from ``-s``)."""
    value = settings.get(name, None)
    if value is None:
        return tuple(default)
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, Iterable) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise AimdSettingsError(name, value, "a list of strings")
