#!/usr/bin/env python3
"""Run Scrapy's own tests stock, then with scrapy-aimd forced into the defaults.

Usage (from anywhere; stdlib only, any python3 >= 3.10 will do)::

    python3 tools/scrapy_contracts/run.py            # set up, stock run, add-on run, diff
    python3 tools/scrapy_contracts/run.py --reuse-stock   # keep the last stock result
    python3 tools/scrapy_contracts/run.py -k retry   # a subset (the diff is then partial)

It prints both summaries and every test that fails only with the add-on, with
its first error line, marked ``expected`` when ``expected-failures.txt`` lists
it (the test checks a stock internal or a documented override) or ``NEW``
when it does not.

Exit status: 0 when every add-on-only failure is expected; 1 when at least one
is not (a Scrapy contract is broken); 2 when the harness itself did not work
(set-up failed, a run crashed, or the probe crawl found the add-on enabled when
it should not be, or the reverse).

Set-up (done once, then reused): a venv in ``<worktree>/.venv-scrapy`` with
this checkout (``-e .``), ``-e ./sitefarm`` and Scrapy's test requirements; the
sdist of the Scrapy version installed there, from PyPI, unpacked in
``tools/scrapy_contracts/.cache/``. Tests are run from that unpacked sdist, so
Scrapy's ``conftest.py`` and mock servers are the ones its CI uses.

How the add-on is forced in: ``shim/sitecustomize.py``, put on ``PYTHONPATH``
for the add-on run only, sets ``scrapy.settings.default_settings.ADDONS`` when
that module is first imported. Every ``Crawler`` that Scrapy's tests build,
and every subprocess they start, then runs the add-on. ``probe_test.py`` runs a
real crawl first in both runs and checks the log ("Enabled addons: ...") and
the scheduler actually used.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = HERE / ".cache"
SHIM = HERE / "shim"
EXPECTED = HERE / "expected-failures.txt"
PROBE = "tests/test_aimd_contracts_probe.py"

# The parts of Scrapy the add-on replaces or sits next to: the engine and its
# loop, the scheduler and its queues, the downloader and its middlewares
# (retry, robots, timeouts, redirects, stats), the duplicate filter, whole
# crawls, the request_left_downloader signal, per-slot settings, CloseSpider,
# stats, signals, start requests, JOBDIR state, reactorless mode. Left out:
# tests/test_extension_throttle.py (the add-on turns AutoThrottle off by
# design, so its 36 tests all fail with NotConfigured and say nothing more)
# and tests/test_robotstxt_interface.py (robots.txt parsers alone, no crawler).
TEST_FILES = [
    "tests/test_engine.py",
    "tests/test_engine_close_spider.py",
    "tests/test_engine_download.py",
    "tests/test_engine_loop.py",
    "tests/test_engine_stop_download_bytes.py",
    "tests/test_engine_stop_download_headers.py",
    "tests/test_scheduler.py",
    "tests/test_scheduler_base.py",
    "tests/test_pqueues.py",
    "tests/test_core_downloader.py",
    "tests/test_downloadermiddleware.py",
    "tests/test_downloadermiddleware_retry.py",
    "tests/test_downloadermiddleware_robotstxt.py",
    "tests/test_downloadermiddleware_stats.py",
    "tests/test_downloadermiddleware_downloadtimeout.py",
    "tests/test_downloadermiddleware_redirect.py",
    "tests/test_downloadermiddleware_offsite.py",
    "tests/test_dupefilters.py",
    "tests/test_crawl.py",
    "tests/test_crawler.py",
    "tests/test_request_left.py",
    "tests/test_request_cb_kwargs.py",
    "tests/test_request_attribute_binding.py",
    "tests/test_downloaderslotssettings.py",
    "tests/test_closespider.py",
    "tests/test_stats.py",
    "tests/test_logstats.py",
    "tests/test_signals.py",
    "tests/test_signalmanager.py",
    "tests/test_spider_start.py",
    "tests/test_spidermiddleware_start.py",
    "tests/test_spidermiddleware_process_start.py",
    "tests/test_spiderstate.py",
    "tests/test_utils_reactorless.py",
]

# Scrapy's [test-requirements] in its tox.ini, minus coverage and xdist (not
# used here) and mitmproxy (its tests skip without it).
TEST_REQUIREMENTS = [
    "attrs",
    "pexpect>=4.8.0",
    "psutil",
    "pyftpdlib>=2.0.1",
    "pygments",
    "pytest>=8.4.1",
    "pytest-rerunfailures",
    "pytest-timeout",
    "sybil>=1.3.0",
    "pytest-twisted>=1.14.3",
    "pytest-asyncio",  # for --reactor none only, as in Scrapy's no-reactor tox env
    # Scrapy 2.19.0's own tests do not pass with w3lib 2.6: its TextResponse calls
    # html_to_unicode() with arguments that w3lib 2.6 deprecates (an error under
    # Scrapy's filterwarnings = error), and 2.6 adds a "/" to a bare host in URLs
    # that three tests compare. 47 tests then fail in the stock run too,
    # which hides whatever the add-on does to them. Lift this with a Scrapy that
    # passes its tests with w3lib 2.6.
    "w3lib<2.6",
]

FAILED = ("failed", "error")


def log(message: str) -> None:
    print(message, flush=True)


def sh(*args: str | Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], check=True, text=True, **kwargs)


def setup(venv: Path) -> Path:
    """Make the venv and unpack the matching sdist; return the sdist folder."""
    python = venv / "bin" / "python"
    if not python.exists():
        log(f"creating {venv}")
        sh(sys.executable, "-m", "venv", venv)
        sh(
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "-e",
            ROOT,
            "-e",
            ROOT / "sitefarm",
            *TEST_REQUIREMENTS,
        )
    version = sh(
        python,
        "-c",
        "import importlib.metadata as m; print(m.version('scrapy'))",
        capture_output=True,
    ).stdout.strip()
    source = CACHE / f"scrapy-{version}"
    if not (source / "tests").is_dir():
        CACHE.mkdir(exist_ok=True)
        archive = CACHE / f"scrapy-{version}.tar.gz"
        if not archive.exists():
            log(f"downloading the Scrapy {version} sdist")
            sh(
                python,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"scrapy=={version}",
                "-d",
                CACHE,
            )
        with tarfile.open(archive) as tar:
            tar.extractall(CACHE, filter="data")
    shutil.copyfile(HERE / "probe_test.py", source / PROBE)
    return source


REACTOR_DEAD = "twisted reactor has stopped"


def run(mode: str, venv: Path, source: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One configuration; returns {node id: {outcome, message, duration}}.

    pytest-timeout stops a test by raising in the reactor's greenlet, which
    kills pytest-twisted's reactor: every later test of that process then fails
    at once with "twisted reactor has stopped". Those tests are run again in a
    fresh process, until none is left (each round has one timed-out test
    fewer, so this ends).
    """
    env = dict(os.environ)
    paths = [str(HERE)] + ([str(SHIM)] if mode == "addon" else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["SCRAPY_CONTRACTS_EXPECT_ADDON"] = "1" if mode == "addon" else "0"
    name = mode if args.reactor == "asyncio" else f"{mode}-{args.reactor}"
    report = CACHE / f"{name}.part.json"
    env["SCRAPY_CONTRACTS_REPORT"] = str(report)
    base = [
        str(venv / "bin" / "python"),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "contracts_report",
        f"--timeout={args.timeout}",
        "-rfE",
    ]
    if args.reactor == "none":
        base += [
            "-p",
            "no:twisted",
            "--reactor=none",
            "-o",
            "asyncio_default_fixture_loop_scope=function",
        ]
    else:  # as Scrapy's default tox env, which has no pytest-asyncio
        base += ["-p", "no:asyncio"]
    selection = [PROBE, *(args.files or TEST_FILES)] + (["-k", args.k] if args.k else [])
    log(
        f"\n=== {mode} run ({len(args.files or TEST_FILES)} files, reactor {args.reactor}): "
        f"{' '.join(base[3:])} ..."
    )
    results: dict[str, Any] = {}
    started = time.monotonic()
    logfile = CACHE / f"{name}.log"
    logfile.write_text("", encoding="utf-8")
    while selection:
        report.unlink(missing_ok=True)
        left = args.run_timeout - (time.monotonic() - started)
        with open(logfile, "a", encoding="utf-8") as out:
            try:
                subprocess.run(
                    base + selection,
                    cwd=source,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=max(left, 1),
                    check=False,
                )
            except subprocess.TimeoutExpired:
                log(f"{mode} run killed after {args.run_timeout} s")
        if not report.exists():
            log(f"{mode} run left no report; see {logfile}")
            return {}
        tests: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))["tests"]
        results.update(tests)
        selection = [k for k, v in tests.items() if REACTOR_DEAD in v["message"]]
        if selection:
            log(
                f"  a timeout stopped the reactor; running the {len(selection)} tests"
                " after it again"
            )
    elapsed = time.monotonic() - started
    (CACHE / f"{name}.json").write_text(json.dumps({"tests": results}, indent=1), encoding="utf-8")
    log(f"{mode}: {summary(results)} in {elapsed:.0f} s (log: {logfile})")
    return results


def summary(tests: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for entry in tests.values():
        counts[entry["outcome"]] = counts.get(entry["outcome"], 0) + 1
    order = ["passed", "failed", "error", "skipped", "xfailed"]
    parts = [f"{counts[k]} {k}" for k in order if counts.get(k)]
    return f"{len(tests)} tests: " + ", ".join(parts)


def load_expected() -> dict[str, str]:
    """``expected-failures.txt``: ``<node id>  # <reason>`` per line."""
    expected: dict[str, str] = {}
    for line in EXPECTED.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        nodeid, _, reason = line.partition("  # ")
        expected[nodeid.strip()] = reason.strip()
    return expected


def compare(stock: dict[str, Any], addon: dict[str, Any], partial: bool) -> int:
    expected = load_expected()
    probe = [
        k
        for k in (stock, addon)
        if k.get(f"{PROBE}::test_addon_configuration", {}).get("outcome") != "passed"
    ]
    if probe or not stock or not addon:
        log(
            "\nHARNESS PROBLEM: the probe crawl did not confirm the configuration of a run "
            "(or a run left no report); nothing below can be trusted."
        )
        return 2
    only = sorted(
        k
        for k, v in addon.items()
        if v["outcome"] in FAILED and stock.get(k, {}).get("outcome") not in FAILED
    )
    both = sorted(
        k
        for k, v in addon.items()
        if v["outcome"] in FAILED and stock.get(k, {}).get("outcome") in FAILED
    )
    new = [k for k in only if k not in expected]
    log(
        f"\n=== {len(only)} tests fail only with the add-on "
        f"({len(only) - len(new)} expected, {len(new)} NEW)"
    )
    for nodeid in new:
        entry = addon[nodeid]
        log(
            f"NEW       {nodeid}  [{entry['duration']:.1f} s, "
            f"stock {stock.get(nodeid, {}).get('duration', 0):.1f} s]"
        )
        log(f"            {entry['message']}")
    for nodeid in only:
        if nodeid in expected:
            log(f"expected  {nodeid}")
            log(f"            {addon[nodeid]['message']}")
            log(f"            why: {expected[nodeid]}")
    if both:
        log(
            f"\n=== {len(both)} tests fail in both runs "
            "(not the add-on's doing; check the environment)"
        )
        for nodeid in both:
            log(f"  {nodeid}: {stock[nodeid]['message']}")
    if not partial:
        stale = sorted(k for k in expected if addon.get(k, {}).get("outcome") not in FAILED)
        if stale:
            log(f"\n=== {len(stale)} entries of expected-failures.txt no longer fail: remove them")
            for nodeid in stale:
                log(f"  {nodeid}: {addon.get(nodeid, {}).get('outcome', 'not run')}")
    slow = sorted(
        (
            (v["duration"], k)
            for k, v in addon.items()
            if v["duration"] > 5 * stock.get(k, {}).get("duration", 0) + 5
        ),
        reverse=True,
    )
    if slow:
        log(f"\n=== {len(slow)} tests take much longer with the add-on (add-on s / stock s)")
        for duration, nodeid in slow[:20]:
            log(f"  {duration:6.1f} / {stock.get(nodeid, {}).get('duration', 0):5.1f}  {nodeid}")
    return 1 if new else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-scrapy")
    parser.add_argument(
        "--timeout", type=int, default=60, help="pytest-timeout, seconds a test (60)"
    )
    parser.add_argument("--run-timeout", type=int, default=3600, help="seconds a whole run (3600)")
    parser.add_argument("--reuse-stock", action="store_true", help="keep the last stock result")
    parser.add_argument(
        "--reactor",
        choices=["asyncio", "none"],
        default="asyncio",
        help="Scrapy's --reactor: asyncio (its default) or none (no Twisted reactor)",
    )
    parser.add_argument("-k", help="pytest -k expression (partial run)")
    parser.add_argument(
        "files", nargs="*", help="test files, relative to the sdist (default: TEST_FILES)"
    )
    args = parser.parse_args()
    try:
        source = setup(args.venv)
    except subprocess.CalledProcessError as exc:
        log(f"set-up failed: {exc}")
        return 2
    stock_file = CACHE / (
        "stock.json" if args.reactor == "asyncio" else f"stock-{args.reactor}.json"
    )
    if args.reuse_stock and stock_file.exists():
        stock = json.loads(stock_file.read_text(encoding="utf-8"))["tests"]
        log(f"stock (reused {stock_file}): {summary(stock)}")
    else:
        stock = run("stock", args.venv, source, args)
    addon = run("addon", args.venv, source, args)
    return compare(stock, addon, partial=bool(args.k or args.files))


if __name__ == "__main__":
    sys.exit(main())
