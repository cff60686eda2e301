"""Scrapy-style cross-reference types for the scrapy-aimd docs.

``.. setting:: AIMD_MIN_DELAY`` marks where a setting is documented and
``:setting:`AIMD_MIN_DELAY``` links to it, as in Scrapy's own docs; likewise
``.. signal::`` and ``:signal:``. Each target also goes into the index.
"""

from __future__ import annotations

from typing import Any


def setup(app: Any) -> dict[str, Any]:
    for name in ("setting", "signal"):
        app.add_crossref_type(directivename=name, rolename=name, indextemplate=f"pair: %s; {name}")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
