"""Sphinx configuration of the scrapy-aimd documentation.

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (or ``tox -e docs``).
Nothing is imported from the package, so the docs build with Sphinx alone.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

_init = (DOCS.parent / "scrapy_aimd" / "__init__.py").read_text(encoding="utf-8")
_match = re.search(r'^__version__ = "([^"]+)"', _init, re.M)
assert _match is not None, "no __version__ in scrapy_aimd/__init__.py"

project = "scrapy-aimd"
release = _match.group(1)
version = ".".join(release.split(".")[:2])

extensions = ["aimddocs"]

exclude_patterns = ["_build"]
templates_path: list[str] = []
nitpicky = True
# Scrapy's own classes, named in signal signatures; no intersphinx (the build stays offline).
nitpick_ignore_regex = [("py:class", r"scrapy\..*")]
default_role = "literal"
highlight_language = "python"
pygments_style = "sphinx"

html_theme = "alabaster"
html_theme_options = {
    "description": "Fast and polite crawling for Scrapy",
    "fixed_sidebar": True,
    "page_width": "1200px",
    "body_max_width": "none",
    "sidebar_width": "230px",
    "show_relbars": True,
}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}
html_static_path = ["_static"]
html_show_copyright = False
html_show_sourcelink = False
html_title = f"scrapy-aimd {release}"
