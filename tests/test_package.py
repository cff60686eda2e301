"""The pure core must import without Scrapy."""

import subprocess
import sys

CORE = ["scrapy_aimd"]


def test_core_modules_do_not_import_scrapy() -> None:
    code = (
        "import sys\n"
        f"for name in {CORE!r}:\n"
        "    __import__(name)\n"
        "assert 'scrapy' not in sys.modules, sorted(m for m in sys.modules if 'scrapy' == m)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
