"""What imports what: the pure core, and the pure Scrapy-side helpers, import
neither Scrapy nor Twisted."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import scrapy_aimd.core

CORE = sorted(
    f"scrapy_aimd.core.{module.name}"
    for module in pkgutil.iter_modules([str(Path(scrapy_aimd.core.__file__).parent)])
)
PURE = [
    "scrapy_aimd",
    *CORE,
    "scrapy_aimd.settings",
    "scrapy_aimd.events",
    "scrapy_aimd.host_totals",
    "scrapy_aimd.inflight",
    "scrapy_aimd.summary",
    "scrapy_aimd.report",
]


def test_the_core_is_every_module_of_the_core_package() -> None:
    assert {"scrapy_aimd.core.controller", "scrapy_aimd.core.frontier"} <= set(CORE)
    folder = Path(scrapy_aimd.core.__file__).parent
    packages = [p for p in folder.glob("[!_]*/__init__.py")]  # the controller is one
    assert len(CORE) == len(list(folder.glob("[!_]*.py"))) + len(packages)


def test_pure_modules_import_neither_scrapy_nor_twisted() -> None:
    code = (
        "import sys\n"
        f"for name in {PURE!r}:\n"
        "    __import__(name)\n"
        "loaded = sorted(m for m in sys.modules if m.partition('.')[0] in ('scrapy', 'twisted'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


#: Besides Scrapy and Twisted, what a core module must not load: the canonicalizer
#: knows no settings, and so no controller (fingerprints need no controller).
NOT_LOADED = {"scrapy_aimd.core.canonical": ("scrapy_aimd.settings", "scrapy_aimd.core.controller")}


def test_each_core_module_alone_imports_neither_scrapy_nor_twisted() -> None:
    for name in CORE:
        forbidden = ("scrapy", "twisted", *NOT_LOADED.get(name, ()))
        code = (
            f"import sys, {name}\n"
            f"loaded = [m for m in {forbidden!r} if m in sys.modules]\n"
            f"assert not loaded, ({name!r}, loaded)\n"
        )
        subprocess.run([sys.executable, "-c", code], check=True)
