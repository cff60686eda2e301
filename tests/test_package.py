"""The pure core must import without Scrapy."""

import subprocess
import sys

CORE = [
    "scrapy_aimd",
    "scrapy_aimd.controller",
    "scrapy_aimd.retry_after",
    "scrapy_aimd.settings",
    "scrapy_aimd.hosts",
    "scrapy_aimd.frontier",
    "scrapy_aimd.canonical",
    "scrapy_aimd.dedup",
    "scrapy_aimd.robotstxt",
    "scrapy_aimd.events",
    "scrapy_aimd.summary",
    "scrapy_aimd.sitefarm",
    "scrapy_aimd.report",
]


def test_core_modules_do_not_import_scrapy() -> None:
    code = (
        "import sys\n"
        f"for name in {CORE!r}:\n"
        "    __import__(name)\n"
        "assert 'scrapy' not in sys.modules, sorted(m for m in sys.modules if 'scrapy' == m)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
