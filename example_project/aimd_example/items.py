"""The demo crawl's items: one per page."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Page:
    url: str
    """The URL as the link spelled it (tracking parameters and all), after redirects."""
    status: int
    title: str
