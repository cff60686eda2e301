"""The picture of a crawl, from its ``AIMD_EVENTS_FILE``.

:mod:`.series` reads the events into per-host series (no HTML, no Scrapy);
:mod:`.draw` holds the geometry a drawing of them needs.
"""
