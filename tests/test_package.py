"""The pure core must import without Scrapy."""

import subprocess
import sys

CORE = [
    "scrapy_aimd",
    "scrapy_aimd.core.controller",
    "scrapy_aimd.core.retry_after",
    "scrapy_aimd.settings",
    "scrapy_aimd.core.hosts",
    "scrapy_aimd.core.frontier",
    "scrapy_aimd.core.canonical",
    "scrapy_aimd.core.dedup",
    "scrapy_aimd.core.robots",
    "scrapy_aimd.events",
    "scrapy_aimd.summary",
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
