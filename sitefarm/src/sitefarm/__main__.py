"""``python -m sitefarm CONFIG.json --log LOG.jsonl``: serve a farm.

Prints exactly one JSON line on stdout once every host listens, then serves until SIGTERM,
SIGINT, stdin EOF (so it never outlives its parent) or ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from sitefarm.presets import benchmark_farm, demo_farm
from sitefarm.runner import serve
from sitefarm.server import CLOCKS
from sitefarm.spec import HostSpec, SpecError, specs_from_json, specs_to_json

if TYPE_CHECKING:
    from sitefarm.server import Farm

PRESETS = {"demo": demo_farm, "benchmark": benchmark_farm}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sitefarm", description=__doc__)
    parser.add_argument("config", nargs="?", help='JSON: {"hosts": [host spec, ...]}')
    parser.add_argument("--preset", choices=sorted(PRESETS), help="serve a bundled farm")
    parser.add_argument("--log", help="write one JSON line per request here")
    parser.add_argument("--max-seconds", type=float, help="stop after this many seconds")
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default="start",
        help="when pauses, outages and token buckets start: at start-up or first request",
    )
    parser.add_argument("--ignore-stdin", action="store_true", help="do not stop when stdin closes")
    parser.add_argument(
        "--print-config", action="store_true", help="print the config as JSON and exit"
    )
    args = parser.parse_args(argv)
    if (args.config is None) == (args.preset is None):
        parser.error("give either CONFIG or --preset")
    try:
        specs: list[HostSpec]
        if args.preset is not None:
            specs = PRESETS[args.preset]()
        else:
            with open(args.config, encoding="utf-8") as file:
                specs = specs_from_json(json.load(file))
    except (OSError, ValueError, SpecError) as error:
        print(f"sitefarm: {error}", file=sys.stderr)
        return 2
    if args.print_config:
        print(json.dumps(specs_to_json(specs), indent=1))
        return 0

    def announce(farm: Farm) -> None:
        ready: dict[str, Any] = {"hosts": farm.urls, "started": farm.started}
        sys.stdout.write(json.dumps(ready) + "\n")
        sys.stdout.flush()

    try:
        asyncio.run(
            serve(
                specs,
                args.log,
                max_seconds=args.max_seconds,
                watch_stdin=not args.ignore_stdin,
                on_ready=announce,
                clock=args.clock,
            )
        )
    except OSError as error:
        print(f"sitefarm: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
