"""The real-server benchmark's nginx part, as the commands quoted in
benchmarks/README.md run it: ``bench_servers.py --server nginx``.

    PYTHONPATH=. python benchmarks/bench_nginx.py [bench_servers.py's options]
"""

from __future__ import annotations

import sys

from bench_servers import main

if __name__ == "__main__":
    sys.exit(main(["--server", "nginx", *sys.argv[1:]]))
