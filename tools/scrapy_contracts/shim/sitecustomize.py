"""Force ``ADDONS = {"scrapy_aimd.Addon": 500}`` into Scrapy's defaults.

Python imports ``sitecustomize`` at start-up when this folder is on
``PYTHONPATH``; the harness puts it there for the add-on run only, and
``scrapy.utils.test.get_testenv()`` passes ``PYTHONPATH`` on to the
subprocesses that Scrapy's tests start, so they get it too. The hook patches
``scrapy.settings.default_settings`` the moment it is first imported (before
any ``Settings`` object exists) instead of importing Scrapy here, so that
start-up order, reactor selection and import-time behaviour stay exactly as in
the stock run.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType

TARGET = "scrapy.settings.default_settings"
FORCED = {os.environ.get("SCRAPY_CONTRACTS_ADDON", "scrapy_aimd.Addon"): 500}


class _ForceAddon(importlib.abc.MetaPathFinder):
    """Finds ``TARGET`` through the other finders and wraps its loader."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                _wrap(spec.loader)
                return spec
        return None


def _wrap(loader: importlib.abc.Loader) -> None:
    original = loader.exec_module

    def exec_module(module: ModuleType) -> None:
        original(module)
        module.ADDONS = dict(FORCED)  # type: ignore[attr-defined]

    loader.exec_module = exec_module  # type: ignore[method-assign]


sys.meta_path.insert(0, _ForceAddon())
