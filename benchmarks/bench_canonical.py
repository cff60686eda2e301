"""Canonicalization throughput: scrapy_aimd.core.canonical against w3lib.

Both canonicalize the same generated set of realistic URLs (mixed-case and IDN
hosts, default and other ports, tracking parameters, fragments, percent-encodings,
non-ASCII paths) in the same run; the best of a few rounds is kept for each.

    PYTHONPATH=. python benchmarks/bench_canonical.py [--urls 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from typing import TYPE_CHECKING

from w3lib.url import canonicalize_url as w3lib_canonicalize_url

from scrapy_aimd.core.canonical import Canonicalizer

if TYPE_CHECKING:
    from collections.abc import Callable

_DOMAINS = [
    "example.com", "shop.example.org", "news.example.net", "blog.example.io", "docs.example.dev",
    "bücher.de", "münchen.de", "пример.рф", "例え.jp", "café.fr", "straße.de", "δοκιμή.gr",
]  # fmt: skip
_WORDS = [
    "products", "category", "news", "2024", "article", "page", "search", "item", "user",
    "résumé", "straße", "日本語", "café", "a b", "%7Euser", "caf%c3%a9", "AC%2FDC", "Index.HTML",
]  # fmt: skip
_KEYS = ["id", "page", "q", "sort", "lang", "size", "color", "ref_id", "offset", "filter"]
_VALUES = ["1", "42", "red", "asc", "en", "a+b", "x%20y", "ünïcode", "10", "%E2%82%AC"]
_TRACKING = ["utm_source", "utm_medium", "utm_campaign", "fbclid", "gclid", "mc_eid", "_ga"]


def generate_urls(count: int, seed: int = 1) -> list[str]:
    """``count`` distinct-looking URLs over a few hundred hosts, as links on
    real sites carry them."""
    rnd = random.Random(seed)
    hosts = [f"{sub}{rnd.randrange(200)}.{domain}" for domain in _DOMAINS for sub in ("", "www")]
    hosts += [f"site{n}.example.com" for n in range(300)]
    urls: list[str] = []
    for _ in range(count):
        host = rnd.choice(hosts)
        if rnd.random() < 0.3:
            host = "".join(c.upper() if rnd.random() < 0.5 else c for c in host)
        scheme = rnd.choice(("http", "https"))
        port = ""
        roll = rnd.random()
        if roll < 0.15:
            port = ":80" if scheme == "http" else ":443"
        elif roll < 0.2:
            port = ":8080"
        segments = [rnd.choice(_WORDS) for _ in range(rnd.randint(1, 4))]
        if rnd.random() < 0.03:
            segments.insert(1, rnd.choice((".", "..")))
        segments.append(str(rnd.randrange(100000)))
        path = "/" + "/".join(segments) + ("/" if rnd.random() < 0.4 else "")
        url = f"{scheme}://{host}{port}{path}"
        params: list[str] = []
        if rnd.random() < 0.6:
            params += [
                f"{rnd.choice(_KEYS)}={rnd.choice(_VALUES)}" for _ in range(rnd.randint(1, 4))
            ]
        if rnd.random() < 0.3:
            params += [f"{name}={rnd.randrange(10**9)}" for name in rnd.sample(_TRACKING, 2)]
        rnd.shuffle(params)
        if params:
            url += "?" + "&".join(params)
        if rnd.random() < 0.2:
            url += rnd.choice(("#top", "#section-2", "#!/app/view", "#comments"))
        urls.append(url)
    return urls


def best_seconds(
    functions: dict[str, Callable[[str], str]], urls: list[str], rounds: int
) -> dict[str, float]:
    """The best time of each function over ``rounds``, taking turns round by
    round, so that a change of load on the machine hits both alike."""
    best = dict.fromkeys(functions, float("inf"))
    for _ in range(rounds):
        for name, function in functions.items():
            gc.collect()
            start = time.perf_counter()
            for url in urls:
                function(url)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def run(count: int, rounds: int) -> float:
    """Print both throughputs and return the ratio (ours / w3lib's)."""
    urls = generate_urls(count)
    times = best_seconds(
        {"w3lib": w3lib_canonicalize_url, "ours": Canonicalizer().canonicalize}, urls, rounds
    )
    print(f"URLs: {len(urls):,} generated, best of {rounds} rounds")
    print(f"w3lib.url.canonicalize_url : {len(urls) / times['w3lib']:12,.0f} URLs/s")
    print(f"scrapy_aimd (8 stages)     : {len(urls) / times['ours']:12,.0f} URLs/s")
    ratio = times["w3lib"] / times["ours"]
    print(f"canonicalization ratio     : {ratio:.2f}x w3lib")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    run(arguments.urls, arguments.rounds)


if __name__ == "__main__":
    main()
