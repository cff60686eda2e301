"""What the add-on changes in a project's settings, at each priority."""

from __future__ import annotations

import logging

import pytest
from scrapy.settings import Settings

from scrapy_aimd.addon import MIDDLEWARE, ROBOTS_MIDDLEWARE, SCRAPY_ROBOTS_MIDDLEWARE, Addon
from scrapy_aimd.settings import AimdSettingsError


def apply(project: dict[str, object], spider: dict[str, object] | None = None) -> Settings:
    settings = Settings()
    settings.setdict(project, priority="project")
    settings.setdict(spider or {}, priority="spider")
    Addon().update_settings(settings)
    return settings


def test_sets_the_components_and_the_middleware() -> None:
    settings = apply({})
    assert settings["SCHEDULER"] == "scrapy_aimd.scheduler.AimdScheduler"
    assert settings["DUPEFILTER_CLASS"] == "scrapy_aimd.dupefilter.AimdDupeFilter"
    assert settings["REQUEST_FINGERPRINTER_CLASS"].endswith("AimdRequestFingerprinter")
    assert settings.getdict("DOWNLOADER_MIDDLEWARES")[MIDDLEWARE] == 950


def test_the_users_delay_and_per_domain_limit_move_to_the_controller() -> None:
    settings = apply({"DOWNLOAD_DELAY": 2.0, "CONCURRENT_REQUESTS_PER_DOMAIN": 3})
    assert settings.getfloat("AIMD_MIN_DELAY") == 2.0
    assert settings.getint("AIMD_MAX_CONCURRENCY") == 3
    assert settings.getfloat("DOWNLOAD_DELAY") == 0.0
    # The downloader never holds back what the scheduler lets start.
    assert settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN") >= settings.getint(
        "CONCURRENT_REQUESTS"
    )


def test_the_raised_per_domain_limit_is_logged_when_nothing_was_carried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Scrapy's default 8 goes to 16 (CONCURRENT_REQUESTS) without a word from
    the user: the log line of changed settings says so, as it does for the rest."""
    with caplog.at_level(logging.INFO, logger="scrapy_aimd.addon"):
        settings = apply({})
    assert settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 16
    (line,) = [r.getMessage() for r in caplog.records if "changed these settings" in r.getMessage()]
    assert "CONCURRENT_REQUESTS_PER_DOMAIN=16 (was 8" in line
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="scrapy_aimd.addon"):
        apply({"CONCURRENT_REQUESTS": 8})
    assert "CONCURRENT_REQUESTS_PER_DOMAIN" not in caplog.text  # left at 8: not said


def test_explicit_aimd_settings_win_over_the_carried_ones() -> None:
    settings = apply({"DOWNLOAD_DELAY": 2.0}, {"AIMD_MIN_DELAY": 0.5})
    assert settings.getfloat("AIMD_MIN_DELAY") == 0.5
    assert settings.getfloat("DOWNLOAD_DELAY") == 0.0


def test_spider_level_settings_are_overridden_too() -> None:
    settings = apply({}, {"AUTOTHROTTLE_ENABLED": True, "DOWNLOAD_DELAY": 1.0})
    assert settings.getbool("AUTOTHROTTLE_ENABLED") is False
    assert settings.getfloat("DOWNLOAD_DELAY") == 0.0
    assert settings.getfloat("AIMD_MIN_DELAY") == 1.0


def test_robots_middleware_is_swapped_only_when_obeying() -> None:
    plain = apply({}).getdict("DOWNLOADER_MIDDLEWARES")
    assert ROBOTS_MIDDLEWARE not in plain
    obeying = apply({"ROBOTSTXT_OBEY": True}).getdict("DOWNLOADER_MIDDLEWARES")
    assert obeying[ROBOTS_MIDDLEWARE] == 100
    assert obeying[SCRAPY_ROBOTS_MIDDLEWARE] is None


def test_users_own_middlewares_are_kept() -> None:
    settings = apply({"DOWNLOADER_MIDDLEWARES": {"myproject.mw.Custom": 543}})
    middlewares = settings.getdict("DOWNLOADER_MIDDLEWARES")
    assert middlewares["myproject.mw.Custom"] == 543
    assert MIDDLEWARE in middlewares


def test_every_aimd_setting_the_code_names_is_known_to_the_typo_check() -> None:
    from test_docs_settings import settings_in_code

    from scrapy_aimd.addon import REMOVED_SETTINGS, known_settings

    assert settings_in_code() - set(REMOVED_SETTINGS) <= known_settings()
    assert {"AIMD_REDIS_URL", "AIMD_FLEET_KEY", "AIMD_FLEET_IDLE_CLOSE"} <= known_settings()
    assert "AIMD_HOST_GIVE_UP" in known_settings()


def test_a_misspelled_setting_is_named_with_the_closest_known_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="scrapy_aimd.addon"):
        apply(
            {"AIMD_MAX_CONCURENCY": 3, "AIMD_MIN_DELAY": 0.1, "AIMD_FOO": 1},
            {"AIMD_DELAY_STEP": 0.2, "AIMD_MARGIN": 0.3},
        )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "AIMD_DELAY_STEP was removed: the gap now closes by what the host accepted, "
        "in logarithmic time",
        # a name like no setting gets no guess (the shared AIMD_ made AIMD_HOSTS one)
        "Unknown setting AIMD_FOO is ignored",
        "AIMD_MARGIN was removed: the controller now measures what it tuned, and it is ignored",
        "Unknown setting AIMD_MAX_CONCURENCY is ignored; did you mean AIMD_MAX_CONCURRENCY?",
    ]


def test_download_slots_become_host_overrides_and_the_slots_delay_zero() -> None:
    settings = apply(
        {
            "DOWNLOAD_SLOTS": {"a.example": {"delay": 0.6, "concurrency": 1}, "b": {"delay": 2}},
            "AIMD_HOSTS": {"b": {"min_delay": 1.0}},
        }
    )
    assert settings.getdict("AIMD_HOSTS") == {
        "a.example": {"min_delay": 0.6, "max_concurrency": 1},
        "b": {"min_delay": 1.0},  # the user's own entry wins
    }
    assert settings.getdict("DOWNLOAD_SLOTS") == {
        "a.example": {"delay": 0.0, "concurrency": 1},
        "b": {"delay": 0.0},
    }


def test_a_carried_download_slot_applies_to_that_slot_only() -> None:
    """As in Scrapy: the slot's own requests (by ``download_slot`` or by host name, on
    any port), not its subdomains; any string is a slot key; the user's own
    AIMD_HOSTS entries keep matching subdomains, and win field by field."""
    from scrapy_aimd.settings import controller_configs

    settings = apply(
        {
            "DOWNLOAD_SLOTS": {
                "example.com": {"delay": 1.0},
                "api pool": {"delay": 0.2, "concurrency": 1},
                "images/cdn": {"concurrency": 2},
                "example.org": {"delay": 2.0},
            },
            "AIMD_HOSTS": {"example.org": {"max_concurrency": 3}},
        }
    )
    configs = controller_configs(settings)
    assert configs.for_host("example.com").min_delay == 1.0
    assert configs.for_host("example.com:8080").min_delay == 1.0
    assert configs.for_host("www.example.com") == configs.default
    assert configs.for_host("api.example.com") == configs.default
    assert configs.for_host("api pool").min_delay == 0.2
    assert configs.for_host("api pool").max_concurrency == 1
    assert configs.for_host("images/cdn").max_concurrency == 2
    org = configs.for_host("example.org")
    assert (org.min_delay, org.max_concurrency) == (2.0, 3)
    www_org = configs.for_host("www.example.org")
    assert (www_org.min_delay, www_org.max_concurrency) == (configs.default.min_delay, 3)


def test_an_invalid_carried_download_slot_names_download_slots() -> None:
    from scrapy_aimd.settings import controller_configs

    settings = apply({"DOWNLOAD_SLOTS": {"api pool": {"delay": -1}}})
    with pytest.raises(
        AimdSettingsError, match=r"Invalid setting DOWNLOAD_SLOTS\['api pool'\]\.delay=-1"
    ):
        controller_configs(settings)


def test_a_users_own_dupefilter_is_kept_and_a_foreign_scheduler_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="scrapy_aimd.addon"):
        settings = apply({"DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter"})
    assert settings["DUPEFILTER_CLASS"] == "scrapy.dupefilters.BaseDupeFilter"
    (warning,) = (r.getMessage() for r in caplog.records)
    assert warning.startswith(
        "scrapy-aimd keeps DUPEFILTER_CLASS=scrapy.dupefilters.BaseDupeFilter"
    )
    # Scrapy's own default is replaced without a word.
    assert apply({"DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter"})[
        "DUPEFILTER_CLASS"
    ].endswith("AimdDupeFilter")
    with pytest.raises(AimdSettingsError, match=r"SCHEDULER='myproject\.Scheduler'"):
        apply({"SCHEDULER": "myproject.Scheduler"})
    assert apply({"SCHEDULER": "scrapy_aimd.scheduler.AimdScheduler"})["SCHEDULER"]


def test_the_manual_configuration_in_the_docs_is_what_the_addon_sets() -> None:
    """docs/getting-started.rst shows the settings the add-on is a shortcut for: the
    same paths."""
    import re
    import textwrap
    from pathlib import Path

    from scrapy_aimd.addon import COMPONENTS

    text = (Path(__file__).resolve().parent.parent / "docs" / "getting-started.rst").read_text()
    section = text.split("\nWithout the add-on\n", 1)[1]
    block = re.search(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", section)
    assert block is not None
    shown: dict[str, object] = {}
    exec(textwrap.dedent(block[1]), shown)
    for name, path in COMPONENTS.items():
        assert shown[name] == path
    assert shown["DOWNLOADER_MIDDLEWARES"] == {
        MIDDLEWARE: 950,
        SCRAPY_ROBOTS_MIDDLEWARE: None,
        ROBOTS_MIDDLEWARE: 100,
    }


def test_the_lines_of_scrapy_startproject_get_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A new project's DOWNLOAD_DELAY = 1 and CONCURRENT_REQUESTS_PER_DOMAIN = 1
    hold every host to one request a second: said once, as a WARNING."""
    with caplog.at_level(logging.WARNING, logger="scrapy_aimd.addon"):
        apply({"DOWNLOAD_DELAY": 1, "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    (warning,) = (r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "DOWNLOAD_DELAY=1 and CONCURRENT_REQUESTS_PER_DOMAIN=1" in warning
    assert "scrapy startproject" in warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scrapy_aimd.addon"):
        apply({"DOWNLOAD_DELAY": 1, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}, {"AIMD_MIN_DELAY": 0})
        apply({"DOWNLOAD_DELAY": 2, "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_a_carried_delay_above_the_default_ceiling_raises_the_ceiling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="scrapy_aimd.addon"):
        settings = apply({"DOWNLOAD_DELAY": "120"})
    assert settings.getfloat("AIMD_MIN_DELAY") == 120.0
    assert settings.getfloat("AIMD_MAX_DELAY") == 120.0
    assert "AIMD_MAX_DELAY=120.0 (was 60.0" in caplog.text
    # one the user set stays, and the crawl names the conflict at start
    settings = apply({"DOWNLOAD_DELAY": 120, "AIMD_MAX_DELAY": 30})
    assert settings.getfloat("AIMD_MAX_DELAY") == 30.0


def test_autothrottles_other_settings_are_named_as_not_used(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="scrapy_aimd.addon"):
        apply(
            {
                "AUTOTHROTTLE_ENABLED": True,
                "AUTOTHROTTLE_MAX_DELAY": 5,
                "AUTOTHROTTLE_TARGET_CONCURRENCY": 2,
            }
        )
    assert "AUTOTHROTTLE_MAX_DELAY=5 is not used (the nearest: AIMD_MAX_DELAY)" in caplog.text
    assert (
        "AUTOTHROTTLE_TARGET_CONCURRENCY=2 is not used (the nearest: AIMD_MAX_CONCURRENCY)"
        in caplog.text
    )
