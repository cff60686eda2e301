"""Fleet mode: many crawler processes share one frontier, one seen set and each
host's politeness through Redis (``AIMD_REDIS_URL``). See docs/fleet.rst."""

from scrapy_aimd.fleet.connection import Fleet, FleetCounters, clear_fleet
from scrapy_aimd.fleet.errors import FleetConnectionLost, FleetStoreError
from scrapy_aimd.fleet.redis_store import Claim, FleetFrontier, FleetStatus, Item, Wait
from scrapy_aimd.fleet.robots_store import FleetRobots, SharedRobots
from scrapy_aimd.fleet.seen import FleetSeenSet

__all__ = [
    "Claim",
    "Fleet",
    "FleetConnectionLost",
    "FleetCounters",
    "FleetFrontier",
    "FleetRobots",
    "FleetSeenSet",
    "FleetStatus",
    "FleetStoreError",
    "Item",
    "SharedRobots",
    "Wait",
    "clear_fleet",
]
