"""The report in a real browser: headless Chromium draws every host and mark, and logs no error.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``),
so the test needs no Python package beyond the standard library. It skips when
Chromium is not installed (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest
from test_report import (
    DEMO_HOSTS,
    fleet_worker,
    lines,
    many_hosts,
    synthetic_events,
    with_fine_counts,
)

from scrapy_aimd.report import order_hosts, read_crawl, read_events_files, render_html
from scrapy_aimd.report.html import MAX_PAGE, MIN_CHART

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
#: The browser: $CHROMIUM (a name or a path) if set, else the first of CHROMIUM_NAMES found.
CHROMIUM = next(
    (
        path
        for name in (os.environ.get("CHROMIUM", ""), *CHROMIUM_NAMES)
        if (path := shutil.which(name))
    ),
    None,
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (apt-get install chromium chromium-driver)",
)

#: Chromium reads DevTools messages on fd 3 and writes them on fd 4: a small Python
#: program moves the pipes there, then becomes Chromium (no preexec_fn, no shell).
_MOVE_PIPES_AND_EXEC = """
import os, sys
reads, writes = int(sys.argv[1]), int(sys.argv[2])
os.dup2(reads, 3)
os.dup2(writes, 4)
os.close(reads)
os.close(writes)
os.execv(sys.argv[3], sys.argv[3:])
"""


class DevToolsError(RuntimeError):
    pass


class Browser:
    """Headless Chromium with one page, spoken to with NUL-separated JSON on two pipes."""

    def __init__(self, executable: str, profile: Path, timeout: float = 30.0) -> None:
        self.timeout = timeout
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        # Above 4, so that moving them to 3 and 4 never overwrites one with the other.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_child_r, from_child_w)]
        for fd in (to_child_r, from_child_w):
            os.close(fd)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _MOVE_PIPES_AND_EXEC,
                *map(str, high),
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--no-first-run",
                "--no-default-browser-check",
                "--hide-scrollbars",
                "--mute-audio",
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=high,
        )
        for fd in high:
            os.close(fd)
        self._out, self._in = to_child_w, from_child_r
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer, keeping the events that come before it."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise DevToolsError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, method: str) -> dict[str, Any]:
        for event in self.events:
            if event["method"] == method:
                return event
        while True:
            event = self._receive()
            if "method" in event:
                self.events.append(event)
                if event["method"] == method:
                    return event

    def open(self, url: str) -> None:
        """Load ``url``; the events kept from then on are this page's."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise DevToolsError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path, width: int, height: int | None = None) -> None:
        """The page at ``width`` pixels, ``height`` high or whole."""
        metrics = {"width": width, "height": height or 900, "deviceScaleFactor": 1}
        self.call("Emulation.setDeviceMetricsOverride", mobile=False, **metrics)
        if height is None:
            metrics["height"] = self.evaluate("document.documentElement.scrollHeight")
            self.call("Emulation.setDeviceMetricsOverride", mobile=False, **metrics)
        try:
            data = self.call("Page.captureScreenshot", format="png")
        finally:
            self.call("Emulation.clearDeviceMetricsOverride")
        path.write_bytes(base64.b64decode(data["data"]))

    def console_errors(self) -> list[str]:
        """Errors the page caused: console calls, uncaught exceptions, blocked loads, CSP."""
        errors = []
        for event in self.events:
            params = event.get("params", {})
            if event["method"] == "Runtime.consoleAPICalled" and params["type"] in (
                "error",
                "assert",
                "warning",
            ):
                text = " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                errors.append(f"console.{params['type']}: {text}")
            elif event["method"] == "Runtime.exceptionThrown":
                errors.append(f"exception: {params['exceptionDetails'].get('text')}")
            elif event["method"] == "Log.entryAdded" and params["entry"]["level"] in (
                "error",
                "warning",
            ):
                entry = params["entry"]
                errors.append(f"{entry['source']} {entry['level']}: {entry['text']}")
        return errors

    def _receive(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise DevToolsError("Chromium did not answer in time")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise DevToolsError(f"Chromium exited ({self.process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        decoded: dict[str, Any] = json.loads(message)
        return decoded

    def close(self) -> None:
        with contextlib.suppress(DevToolsError, OSError):
            self.call("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._out, self._in):
            os.close(fd)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    assert CHROMIUM is not None
    chromium = Browser(CHROMIUM, tmp_path_factory.mktemp("chromium-profile"))
    yield chromium
    chromium.close()


def open_page(browser: Browser, path: Path, page: str) -> None:
    path.write_text(page, encoding="utf-8")
    browser.open(path.as_uri())


@contextlib.contextmanager
def window(browser: Browser, width: int) -> Iterator[None]:
    """The page in a window ``width`` pixels wide, for the time of the block."""
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        mobile=False,
        width=width,
        height=900,
        deviceScaleFactor=1,
    )
    try:
        yield
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")


# What the page looks like to someone reading it: drawn boxes, not just markup.
MEASURE = """
(() => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.width, r.height]; };
  const hosts = [...document.querySelectorAll("section.host")].map((s) => ({
    host: s.dataset.host,
    heading: s.querySelector("h2").innerText,
    svg: box(s.querySelector("svg")),
    marks: [...s.querySelectorAll("g.mark")].map((m) => [m.classList[1], box(m)]),
    pauses: [...s.querySelectorAll("g.pause rect")].map(box),
    lines: [...s.querySelectorAll("path.limit, path.gap")].map((p) => p.getTotalLength()),
  }));
  const rows = [...document.querySelectorAll("#summary tbody tr")].map(
    (tr) => [...tr.children].map((td) => td.innerText)
  );
  return {
    title: document.title,
    hosts,
    rows,
    lanes: [...document.querySelectorAll("g.lane")].map((g) => g.dataset.host),
    legend: document.querySelector(".legend").innerText,
    pageWidth: document.documentElement.scrollWidth,
    viewWidth: document.documentElement.clientWidth,
    resources: performance.getEntriesByType("resource").length,
  };
})()
"""


def test_the_report_renders_hosts_marks_and_table_without_errors(
    browser: Browser, tmp_path: Path
) -> None:
    crawl = read_crawl(lines(synthetic_events()))
    open_page(browser, tmp_path / "crawl.html", render_html(crawl))
    page = browser.evaluate(MEASURE)
    assert browser.console_errors() == []
    assert page["title"] == "Crawl of demo"
    assert [h["host"] for h in page["hosts"]] == order_hosts(crawl)
    assert page["lanes"] == [h["host"] for h in page["hosts"]]
    assert [row[0] for row in page["rows"]] == [h["host"] for h in page["hosts"]]
    for host in page["hosts"]:
        assert host["heading"] == host["host"]
        width, height = host["svg"]
        assert width > 600
        assert height > 250
        assert all(length > 100 for length in host["lines"]), host["host"]
        assert all(w > 0 and h > 0 for _, (w, h) in host["marks"])
    by_host = {h["host"]: h for h in page["hosts"]}
    kinds = {kind for h in page["hosts"] for kind, _ in h["marks"]}
    assert kinds == {"mark-429", "mark-5xx", "mark-timeout", "mark-latency"}
    assert by_host["ratelimited.example:8443"]["pauses"]
    assert all(w >= 1 and h > 100 for w, h in by_host["ratelimited.example:8443"]["pauses"])
    assert not by_host["fast.example"]["marks"]
    assert not by_host["fast.example"]["pauses"]
    assert "paused (Retry-After)" in page["legend"]
    assert "429" in page["legend"]
    assert page["pageWidth"] <= page["viewWidth"]  # no sideways scrolling
    assert page["resources"] == 0  # nothing was loaded


def test_a_killed_crawl_with_garbage_renders_without_errors(
    browser: Browser, tmp_path: Path
) -> None:
    text = lines(synthetic_events(many_hosts(12), duration=60.0))[:-1]
    text[100:100] = ["{not json\n", '{"t": 1, "event": "mystery", "host": "a"}\n']
    text[-1] = text[-1][:12]
    open_page(browser, tmp_path / "killed.html", render_html(read_crawl(text)))
    page = browser.evaluate(MEASURE)
    notes = browser.evaluate("document.querySelector('aside.notes').innerText")
    assert browser.console_errors() == []
    assert len(page["hosts"]) == 12
    assert len(page["rows"]) == 12
    assert "no close line" in notes
    assert "2 lines were not readable" in notes
    assert "mystery" in notes


def test_errors_in_a_page_are_seen(browser: Browser, tmp_path: Path) -> None:
    """The checks above would find an error if there were one."""
    open_page(
        browser,
        tmp_path / "blocked.html",
        "<!DOCTYPE html><html><head><meta http-equiv='Content-Security-Policy' "
        "content=\"default-src 'none'\"></head><body><img src='https://example.invalid/x.png'>",
    )
    errors = browser.console_errors()
    assert any("Content Security Policy" in e for e in errors), errors
    open_page(
        browser,
        tmp_path / "broken.html",
        "<!DOCTYPE html><html><body><script>console.error('boom'); nosuchname()</script>",
    )
    errors = browser.console_errors()
    assert "console.error: boom" in errors
    assert any(e.startswith("exception: ") for e in errors), errors


def test_screenshot(browser: Browser, tmp_path: Path) -> None:
    """A picture of the demo crawl, for people to look at (kept in the test's tmp dir)."""
    crawl = read_crawl(lines(synthetic_events(DEMO_HOSTS)))
    open_page(browser, tmp_path / "crawl.html", render_html(crawl))
    shot = tmp_path / "crawl.png"
    browser.screenshot(shot, 1040)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = os.environ.get("REPORT_SCREENSHOT")
    if target:
        shutil.copyfile(shot, target)


# Under the pointer: the tooltip a reader gets at a point of each chart.
HOVER = """
(() => {
  const tipAt = (svg, fx, fy) => {
    svg.scrollIntoView({block: "center"});
    const r = svg.getBoundingClientRect();
    let el = document.elementFromPoint(r.left + r.width * fx, r.top + r.height * fy);
    while (el && el !== document.body) {
      const title = [...el.children].find((c) => c.tagName === "title");
      if (title && el !== svg) return title.textContent;
      el = el.parentElement;
    }
    return null;
  };
  const overview = document.querySelector("figure.overview svg");
  return {
    total: tipAt(overview, 0.3, 0.2),
    hosts: [...document.querySelectorAll("section.host")].map((s) => ({
      host: s.dataset.host,
      tips: [0.25, 0.5, 0.75].map((fy) => tipAt(s.querySelector("svg"), 0.3, fy)),
    })),
  };
})()
"""


def test_every_chart_gives_its_values_under_the_pointer(browser: Browser, tmp_path: Path) -> None:
    crawl = read_crawl(lines(synthetic_events()))
    open_page(browser, tmp_path / "crawl.html", render_html(crawl))
    with window(browser, 1400):
        page = browser.evaluate(HOVER)
    assert page["total"] is not None and "responses/s, all hosts" in page["total"]
    assert [h["host"] for h in page["hosts"]] == order_hosts(crawl)
    for host in page["hosts"]:
        for tip in host["tips"]:  # the limit, the rates and the latency panels
            assert tip is not None, host["host"]
            assert "responses/s" in tip and "limit " in tip and "gap " in tip, (host, tip)


@pytest.mark.parametrize("width", [600, 1000, 1400, 1900])
def test_the_layout_uses_the_windows_width(browser: Browser, tmp_path: Path, width: int) -> None:
    crawl = read_crawl(lines(synthetic_events()))
    open_page(browser, tmp_path / "crawl.html", render_html(crawl))
    with window(browser, width):
        page = browser.evaluate(MEASURE)
        fonts = browser.evaluate(
            "[...document.querySelectorAll('section.host svg text')].slice(0, 20).map("
            "(t) => t.getBoundingClientRect().height)"
        )
    assert page["pageWidth"] <= page["viewWidth"]  # no sideways scrolling
    for host in page["hosts"]:
        svg_width = host["svg"][0]
        assert svg_width >= min(max(width, MIN_CHART), MAX_PAGE) * 0.9, (width, svg_width)
    # The charts' text stays readable: neither tiny in a narrow window nor huge in a wide one.
    assert all(9 <= h <= 24 for h in fonts), fonts


def test_the_legend_names_only_what_the_page_draws(browser: Browser, tmp_path: Path) -> None:
    events = [e for e in synthetic_events() if e.get("host") in (None, "fast.example")]
    open_page(browser, tmp_path / "calm.html", render_html(read_crawl(lines(events))))
    legend = browser.evaluate("document.querySelector('.legend').innerText")
    marks = browser.evaluate("document.querySelectorAll('g.mark, g.pause').length")
    assert browser.console_errors() == []
    assert marks == 0
    assert "throttle" not in legend
    assert "paused" not in legend
    assert "concurrency limit" in legend


def test_screenshot_of_a_wide_window_and_a_short_crawl(browser: Browser, tmp_path: Path) -> None:
    """Pictures for people to look at: the demo at 1400 pixels, and a 3-second crawl."""
    shots = {}
    events = synthetic_events(DEMO_HOSTS)
    crawl = read_crawl(lines(events))
    open_page(browser, tmp_path / "crawl.html", render_html(crawl))
    shots["wide"] = tmp_path / "wide.png"
    browser.screenshot(shots["wide"], 1400)
    events = synthetic_events(DEMO_HOSTS[:2], duration=3.0)
    short = with_fine_counts(read_crawl(lines(events)), events)
    open_page(browser, tmp_path / "short.html", render_html(short))
    assert browser.console_errors() == []
    shots["short"] = tmp_path / "short.png"
    browser.screenshot(shots["short"], 1400)
    for shot in shots.values():
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = os.environ.get("REPORT_SCREENSHOT_DIR")
    if target:
        for name, shot in shots.items():
            shutil.copyfile(shot, os.path.join(target, f"report-{name}.png"))


# The fleet's lanes as drawn: each lane's box, and the tooltip at its middle.
LANES = """
(() => {
  const lanes = (root) => [...root.querySelectorAll("g.worker-lane")].map((g) => {
    const r = g.getBoundingClientRect();
    g.scrollIntoView({block: "center"});
    const box = g.getBoundingClientRect();
    let el = document.elementFromPoint(box.left + box.width * 0.5, box.top + box.height / 2);
    while (el && !(el.tagName === "g" && el.classList.contains("worker-lane"))) {
      el = el.parentElement;
    }
    return {
      worker: g.dataset.worker,
      box: [r.width, r.height],
      band: g.querySelector("path") ? g.querySelector("path").getBBox().width : 0,
      tip: el ? el.querySelector("title").textContent : null,
    };
  });
  return {
    overview: lanes(document.querySelector("figure.overview")),
    hosts: [...document.querySelectorAll("section.host")].map((s) => lanes(s)),
  };
})()
"""


def test_a_fleet_draws_a_lane_per_worker(browser: Browser, tmp_path: Path) -> None:
    """Three workers' files: a lane each in the overview and under every host, each with
    its band and its tooltip; a screenshot for people to look at."""
    fleet = dict(fleet_worker(k) for k in range(3))
    paths = []
    for i, events in enumerate(fleet.values()):
        paths.append(tmp_path / f"events-{i}.jsonl")
        paths[-1].write_text("".join(lines(events)), encoding="utf-8")
    crawl = read_events_files(paths)
    open_page(browser, tmp_path / "fleet.html", render_html(crawl))
    with window(browser, 1400):
        page = browser.evaluate(LANES)
    assert browser.console_errors() == []
    assert len(page["hosts"]) == len(crawl.hosts)
    for lanes in [page["overview"], *page["hosts"]]:
        assert [lane["worker"] for lane in lanes] == list(fleet)
        for lane in lanes:
            width, height = lane["box"]
            assert width > 600 and height >= 10, lane
            assert lane["band"] > 100, lane  # its starts are drawn across the crawl
            assert lane["tip"] is not None and lane["tip"].startswith(lane["worker"]), lane
            assert "% of the starts here" in lane["tip"]
    shot = tmp_path / "fleet.png"
    browser.screenshot(shot, 1400)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = os.environ.get("REPORT_SCREENSHOT_DIR")
    if target:
        shutil.copyfile(shot, os.path.join(target, "report-fleet.png"))
