"""Reading the controller settings: defaults, strings from ``-s``, errors, AIMD_HOSTS."""

from __future__ import annotations

import dataclasses
import decimal
import fractions
import json
import logging
import math
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_aimd.core.controller import ControllerConfig
from scrapy_aimd.settings import (
    CONTROLLER_SETTINGS,
    REMOVED_CONTROLLER_SETTINGS,
    AimdSettingsError,
    HostConfigs,
    controller_configs,
    read_bool,
    read_choice,
    read_float,
    read_int,
    read_str_list,
)


def configs(**settings: Any) -> HostConfigs:
    return controller_configs(settings)


def test_defaults() -> None:
    cfg = configs().default
    assert cfg == ControllerConfig(min_delay=0.0, max_concurrency=8)
    assert cfg.max_delay == 60.0
    assert cfg.adaptive is True
    assert cfg.fast_latency == 0.25
    assert cfg.latency_factor == 2.0
    assert cfg.throttle_codes == frozenset({429, 503})
    assert cfg.max_retry_after == 3600.0


def test_min_delay_and_max_concurrency_default_to_scrapys_settings() -> None:
    cfg = configs(DOWNLOAD_DELAY=1.5, CONCURRENT_REQUESTS_PER_DOMAIN=4).default
    assert cfg.min_delay == 1.5
    assert cfg.max_concurrency == 4
    cfg = configs(
        DOWNLOAD_DELAY=1.5,
        CONCURRENT_REQUESTS_PER_DOMAIN=4,
        AIMD_MIN_DELAY=0.25,
        AIMD_MAX_CONCURRENCY=16,
    ).default
    assert cfg.min_delay == 0.25
    assert cfg.max_concurrency == 16


def test_every_setting_reaches_its_field() -> None:
    values: dict[str, Any] = {
        "AIMD_MIN_DELAY": 0.5,
        "AIMD_MAX_DELAY": 30.0,
        "AIMD_MAX_CONCURRENCY": 3,
        "AIMD_ADAPTIVE_CONCURRENCY": False,
        "AIMD_FAST_LATENCY": 0.5,
        "AIMD_LATENCY_FACTOR": 3.0,
        "AIMD_THROTTLE_CODES": [429],
        "AIMD_MAX_RETRY_AFTER": 600.0,
        "AIMD_BLOCK_CODES": [403, 451],
    }
    cfg = controller_configs(values).default
    assert cfg == ControllerConfig(
        min_delay=0.5,
        max_delay=30.0,
        max_concurrency=3,
        adaptive=False,
        fast_latency=0.5,
        latency_factor=3.0,
        throttle_codes=frozenset({429}),
        max_retry_after=600.0,
        block_codes=frozenset({403, 451}),
    )
    # Every field of the config has a setting, and every setting is listed.
    assert set(values) | {"AIMD_HOSTS"} == set(CONTROLLER_SETTINGS)
    assert len(values) == len(dataclasses.fields(ControllerConfig))


def test_strings_from_the_command_line() -> None:
    cfg = configs(
        AIMD_MIN_DELAY="0.5",
        AIMD_MAX_DELAY="10",
        AIMD_MAX_CONCURRENCY="4",
        AIMD_ADAPTIVE_CONCURRENCY="false",
        AIMD_THROTTLE_CODES="429, 503,502",
        AIMD_HOSTS='{"example.com": {"max_concurrency": "2", "min_delay": "1.5"}}',
    )
    assert cfg.default.min_delay == 0.5
    assert cfg.default.max_delay == 10.0
    assert cfg.default.max_concurrency == 4
    assert cfg.default.adaptive is False
    assert cfg.default.throttle_codes == frozenset({429, 502, 503})
    assert cfg.for_host("example.com").max_concurrency == 2
    assert cfg.for_host("example.com").min_delay == 1.5


@pytest.mark.parametrize(
    ("value", "codes"),
    [
        ([429, 503], {429, 503}),
        ((429,), {429}),
        ({503}, {503}),
        ("429", {429}),
        ("[429, 503]", {429, 503}),
        ("429 503", {429, 503}),
        (["429", "503"], {429, 503}),
        ([], set()),
        ("", set()),
    ],
)
def test_throttle_codes_forms(value: Any, codes: set[int]) -> None:
    assert configs(AIMD_THROTTLE_CODES=value).default.throttle_codes == frozenset(codes)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AIMD_MIN_DELAY", -1),
        ("AIMD_MIN_DELAY", "fast"),
        ("AIMD_MIN_DELAY", math.nan),
        ("AIMD_MAX_DELAY", -0.5),
        ("AIMD_MAX_DELAY", math.inf),
        ("AIMD_MAX_CONCURRENCY", 0),
        ("AIMD_MAX_CONCURRENCY", 2.5),
        ("AIMD_MAX_CONCURRENCY", "many"),
        ("AIMD_ADAPTIVE_CONCURRENCY", "maybe"),
        ("AIMD_FAST_LATENCY", -0.1),
        ("AIMD_LATENCY_FACTOR", 0.5),
        ("AIMD_THROTTLE_CODES", [42]),
        ("AIMD_THROTTLE_CODES", "429,abc"),
        ("AIMD_THROTTLE_CODES", [True]),
        ("AIMD_THROTTLE_CODES", 429),
        ("AIMD_MAX_RETRY_AFTER", -1),
        ("AIMD_HOSTS", "not json"),
        ("AIMD_HOSTS", "[1, 2]"),
        ("AIMD_HOSTS", {"": {"min_delay": 1}}),
        ("AIMD_HOSTS", {"http://example.com": {"min_delay": 1}}),
        ("DOWNLOAD_DELAY", -1),
        ("CONCURRENT_REQUESTS_PER_DOMAIN", 0),
    ],
)
def test_an_invalid_value_names_the_setting_and_the_value(name: str, value: Any) -> None:
    with pytest.raises(AimdSettingsError) as info:
        controller_configs({name: value})
    message = str(info.value)
    assert name in message
    assert repr(value) in message or str(value) in message


@pytest.mark.parametrize(
    ("name", "minimum"),
    [("AIMD_MAX_CONCURRENCY", 1)],
)
@pytest.mark.parametrize("value", [0, -1, 2.5, "2.5", "x", 10**30])
def test_a_whole_number_setting_states_one_bound_whatever_the_value(
    name: str, minimum: int, value: Any
) -> None:
    """2.5 and 0 are refused for the same rule, in the same words."""
    expected = rf"expected a whole number (>= {minimum}|from {minimum} to \d+)$"
    with pytest.raises(AimdSettingsError, match=expected):
        configs(**{name: value})
    field_name = name.removeprefix("AIMD_").lower()
    with pytest.raises(AimdSettingsError, match=expected):
        configs(AIMD_HOSTS={"example.com": {field_name: value}})


def test_min_delay_above_max_delay_is_an_error() -> None:
    with pytest.raises(AimdSettingsError, match=r"AIMD_MIN_DELAY.*AIMD_MAX_DELAY"):
        configs(AIMD_MIN_DELAY=10, AIMD_MAX_DELAY=5)
    with pytest.raises(AimdSettingsError, match="AIMD_MIN_DELAY"):
        configs(DOWNLOAD_DELAY=100)


def test_aimd_hosts_needs_a_dict_per_host() -> None:
    with pytest.raises(AimdSettingsError, match=r"AIMD_HOSTS\['example\.com'\]=2"):
        configs(AIMD_HOSTS={"example.com": 2})


def test_a_host_given_twice_in_aimd_hosts_is_an_error() -> None:
    with pytest.raises(AimdSettingsError, match=r"AIMD_HOSTS.*twice"):
        configs(AIMD_HOSTS={"example.com": {}, "EXAMPLE.com.": {"min_delay": 1}})


def test_an_unknown_key_in_aimd_hosts_is_an_error() -> None:
    with pytest.raises(AimdSettingsError, match=r"AIMD_HOSTS.*example\.com.*max_conc") as info:
        configs(AIMD_HOSTS={"example.com": {"max_conc": 2}})
    assert "max_concurrency" in str(info.value)  # the message lists the valid keys


def test_an_invalid_value_in_aimd_hosts_names_the_host_and_the_key() -> None:
    with pytest.raises(AimdSettingsError, match=r"AIMD_HOSTS\['example\.com'\]\.min_delay"):
        configs(AIMD_HOSTS={"example.com": {"min_delay": -1}})
    with pytest.raises(AimdSettingsError, match=r"AIMD_HOSTS\['example\.com'\]\.min_delay"):
        configs(AIMD_HOSTS={"example.com": {"min_delay": 90}})  # above max_delay 60


def test_a_host_override_applies_to_the_host_and_its_subdomains() -> None:
    cfg = configs(
        AIMD_MAX_CONCURRENCY=8,
        AIMD_HOSTS={
            "example.com": {"max_concurrency": 2, "min_delay": 0.5},
            "api.example.com": {"max_concurrency": 1},
            "localhost:8080": {"min_delay": 3},
        },
    )
    assert cfg.for_host("example.com").max_concurrency == 2
    assert cfg.for_host("example.com").min_delay == 0.5
    assert cfg.for_host("www.example.com").max_concurrency == 2
    assert cfg.for_host("example.com:8443").max_concurrency == 2
    # The longest match wins, and overrides start from the defaults, not each other.
    assert cfg.for_host("api.example.com").max_concurrency == 1
    assert cfg.for_host("v2.api.example.com").max_concurrency == 1
    assert cfg.for_host("api.example.com").min_delay == 0.0
    # Not a subdomain: a suffix of the name only.
    assert cfg.for_host("notexample.com") is cfg.default
    assert cfg.for_host("example.com.evil.net") is cfg.default
    # A port in the key applies to that port only.
    assert cfg.for_host("localhost:8080").min_delay == 3.0
    assert cfg.for_host("localhost") is cfg.default
    assert cfg.for_host("localhost:9090") is cfg.default
    assert cfg.for_host("") is cfg.default
    # Other fields keep the defaults.
    assert cfg.for_host("example.com").max_delay == cfg.default.max_delay


def test_host_keys_are_normalised() -> None:
    cfg = configs(
        AIMD_HOSTS={
            "Example.COM.": {"max_concurrency": 2},
            "bücher.example": {"max_concurrency": 3},
            "[::1]:8080": {"max_concurrency": 4},
            "secure.example:443": {"max_concurrency": 5},
        }
    )
    assert cfg.for_host("secure.example").max_concurrency == 5
    assert cfg.for_host("example.com").max_concurrency == 2
    assert cfg.for_host("xn--bcher-kva.example").max_concurrency == 3
    assert cfg.for_host("[::1]:8080").max_concurrency == 4
    assert cfg.for_host("[::1]") is cfg.default


def test_the_result_is_cached_per_host() -> None:
    cfg = configs(AIMD_HOSTS={"example.com": {"max_concurrency": 2}})
    first = cfg.for_host("www.example.com")
    assert cfg.for_host("www.example.com") is first
    plain = configs()
    assert plain.for_host("anything.org") is plain.default


def test_an_override_may_set_every_field() -> None:
    every = {
        f.name: getattr(ControllerConfig(), f.name) for f in dataclasses.fields(ControllerConfig)
    }
    every["throttle_codes"] = [429]
    every["block_codes"] = [403]
    cfg = configs(AIMD_HOSTS=json.dumps({"example.com": every}))
    assert cfg.for_host("example.com").throttle_codes == frozenset({429})


def test_block_codes_are_read_and_checked_naming_the_setting() -> None:
    assert configs(AIMD_BLOCK_CODES="403,451").default.block_codes == frozenset({403, 451})
    assert configs(AIMD_BLOCK_CODES=[]).default.block_codes == frozenset()
    with pytest.raises(AimdSettingsError, match="AIMD_BLOCK_CODES"):
        configs(AIMD_BLOCK_CODES="forbidden")
    with pytest.raises(AimdSettingsError, match=r"AIMD_BLOCK_CODES.*AIMD_THROTTLE_CODES"):
        configs(AIMD_BLOCK_CODES=[403, 429])
    with pytest.raises(AimdSettingsError, match="AIMD_BLOCK_CODES"):
        configs(AIMD_BLOCK_CODES=[1403])


def test_scrapy_settings_work_too() -> None:
    code = (
        "from scrapy.settings import Settings\n"
        "from scrapy_aimd.settings import controller_configs\n"
        "s = Settings({'AIMD_MIN_DELAY': '0.5', 'AIMD_HOSTS': {'a.com': {'max_delay': 5}}})\n"
        "c = controller_configs(s)\n"
        "assert c.default.min_delay == 0.5, c.default\n"
        "assert c.default.max_concurrency == 8, c.default\n"
        "assert c.for_host('a.com').max_delay == 5.0\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", sorted(REMOVED_CONTROLLER_SETTINGS))
def test_a_removed_setting_is_ignored(name: str) -> None:
    """The add-on warns about it (tests/test_addon.py); the config has no such field."""
    cfg = controller_configs({name: 0}).default
    assert cfg == ControllerConfig()


def test_a_removed_field_in_aimd_hosts_is_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="scrapy_aimd.settings"):
        cfg = controller_configs({"AIMD_HOSTS": {"a.com": {"margin": 0.3, "max_delay": 5}}})
    assert cfg.for_host("a.com").max_delay == 5.0
    assert "AIMD_HOSTS['a.com'].margin was removed" in caplog.text


# -- the generic readers: nothing but a valid value or AimdSettingsError -------------


class _Hostile:
    """A setting value whose every conversion fails."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __float__(self) -> float:
        raise ArithmeticError("no float")

    def __int__(self) -> int:
        raise ArithmeticError("no int")

    def __iter__(self) -> Any:
        raise RuntimeError("no iteration")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparison")

    __hash__ = None  # type: ignore[assignment]


def _int(settings: dict[str, Any], name: str) -> object:
    return read_int(settings, name, 0, minimum=-5)


def _float(settings: dict[str, Any], name: str) -> object:
    return read_float(settings, name, 0.0, minimum=None)


def _bool(settings: dict[str, Any], name: str) -> object:
    return read_bool(settings, name, False)


def _choice(settings: dict[str, Any], name: str) -> object:
    return read_choice(settings, name, "keep", ("keep", "drop"))


def _str_list(settings: dict[str, Any], name: str) -> object:
    return read_str_list(settings, name)


@pytest.mark.parametrize(
    ("reader", "value"),
    [
        (_int, math.inf),  # OverflowError from int()
        (_int, -math.inf),
        (_int, math.nan),
        (_int, 10**400),  # a whole number no setting can hold
        (_int, 10**5000),  # its repr raises ValueError
        (_int, "9" * 5000),
        (_int, decimal.Decimal("Infinity")),
        (_int, _Hostile()),
        (_float, 10**400),  # OverflowError from float()
        (_float, "1e400"),
        (_float, decimal.Decimal("sNaN")),
        (_float, fractions.Fraction(10**400, 3)),
        (_float, _Hostile()),
        (_float, 1j),
        (_bool, _Hostile()),
        (_choice, _Hostile()),
        (_choice, ["drop"]),
        (_str_list, _Hostile()),
        (_str_list, {"a": 1}),  # a mapping is not a list
        (_str_list, b"a,b"),
        (_str_list, [1, 2]),
    ],
    ids=lambda v: getattr(v, "__name__", type(v).__name__),
)
def test_odd_values_raise_a_settings_error_naming_the_setting(
    reader: Callable[[dict[str, Any], str], object], value: object
) -> None:
    with pytest.raises(AimdSettingsError, match="AIMD_ODD") as info:
        reader({"AIMD_ODD": value}, "AIMD_ODD")
    assert info.value.name == "AIMD_ODD"
    assert info.value.value is value


def test_an_iterator_is_read_once() -> None:
    assert _str_list({"AIMD_ODD": iter(["a", "b"])}, "AIMD_ODD") == ("a", "b")


_ODD_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**5000)
    | st.floats()
    | st.decimals()
    | st.fractions()
    | st.complex_numbers()
    | st.text(max_size=20)
    | st.sampled_from(["inf", "-inf", "nan", "1e400", "-1e400", "9" * 5000, " 3 ", "1_0"])
    | st.binary(max_size=10)
    | st.builds(_Hostile),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(max_size=3), children, max_size=3)
        | st.tuples(children)
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(
    reader=st.sampled_from([_int, _float, _bool, _choice, _str_list]),
    value=_ODD_VALUES,
)
def test_any_value_gives_a_valid_value_or_a_settings_error(
    reader: Callable[[dict[str, Any], str], object], value: object
) -> None:
    try:
        result = reader({"AIMD_ODD": value}, "AIMD_ODD")
    except AimdSettingsError as exc:
        error: AimdSettingsError | None = exc
    else:
        error = None
    if error is not None:
        assert error.name == "AIMD_ODD"
        assert "AIMD_ODD" in str(error)
        return
    if reader is _int:
        assert type(result) is int and -5 <= result <= 2**63 - 1
    elif reader is _float:
        assert type(result) is float and math.isfinite(result)
    elif reader is _bool:
        assert type(result) is bool
    elif reader is _choice:
        assert type(result) is str and result in ("keep", "drop")
    else:
        assert type(result) is tuple and all(type(item) is str for item in result)


@pytest.mark.parametrize("name", ["AIMD_THROTTLE_CODES", "AIMD_HOSTS"])
def test_a_value_whose_repr_fails_still_names_the_setting(name: str) -> None:
    huge = 10**5000  # repr() raises ValueError past Python's digit limit
    with pytest.raises(
        AimdSettingsError, match=f"Invalid setting {name}=<a int that cannot be shown>"
    ):
        controller_configs({name: huge})
