# Scrapy settings for the scrapy-aimd example project.
#
# Only what differs from Scrapy's defaults is here. The scrapy-aimd settings
# (AIMD_*) are described in the package's documentation, docs/settings.rst.

BOT_NAME = "aimd_example"

SPIDER_MODULES = ["aimd_example.spiders"]
NEWSPIDER_MODULE = "aimd_example.spiders"

# The one line that enables scrapy-aimd: its scheduler, feedback middleware,
# fingerprinter and duplicate filter, and its robots.txt middleware in place of
# Scrapy's (because ROBOTSTXT_OBEY is on). It also turns off what would fight
# them: AutoThrottle and the downloader's own per-slot delay.
ADDONS = {"scrapy_aimd.Addon": 500}

# Obey robots.txt: RFC 9309 outcomes, and each host's Crawl-delay becomes the
# floor of the gap between two requests to it.
ROBOTSTXT_OBEY = True

# No DOWNLOAD_DELAY and no CONCURRENT_REQUESTS_PER_DOMAIN here: with the add-on
# they would become AIMD_MIN_DELAY and AIMD_MAX_CONCURRENCY, a fixed floor and
# ceiling for every host. Leave them out and each host's controller finds its
# own pace, between AIMD_MIN_DELAY (0 s) and AIMD_MAX_DELAY (60 s), with 1 to
# AIMD_MAX_CONCURRENCY (8) requests in flight.

# Write one JSON line per controller event (request starts, responses,
# throttles, pauses, gap and limit changes). Draw the crawl with
#     python -m scrapy_aimd.report output/demo-events.jsonl -o output/demo-crawl.html
AIMD_EVENTS_FILE = "output/demo-events.jsonl"

# INFO shows what the controllers do ("Slowing down ...", "Pausing ...",
# "Crawl-delay of ...") without a line per request; the crawl ends with the
# per-host summary. Set LOG_LEVEL = "DEBUG" to see every request.
LOG_LEVEL = "INFO"
# Scrapy's stats dump is long; the per-host summary says what matters here.
# Set STATS_DUMP = True to see the aimd/* stats as well.
STATS_DUMP = False

TELNETCONSOLE_ENABLED = False
FEED_EXPORT_ENCODING = "utf-8"
