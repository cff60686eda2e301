"""The fleet's seen set in Redis: bytes per URL, against scrapy-redis's dupefilter.

One run, one fresh ``redis-server`` (persistence off), the same URLs:

- scrapy-aimd: the 64-bit keys of ``AimdRequestFingerprinter`` in 2**15
  buckets of integers (``FleetSeenSet``'s layout, as the pushes write it),
  which Redis keeps as intsets;
- scrapy-redis's format: the 40-character hex SHA1 of each request, in one
  Redis set, written with ``SADD`` directly (pipelined, as fast as it goes).

Memory is ``INFO memory``'s ``used_memory`` after minus before, over the URLs;
the time is the wall time to add them all, keys computed beforehand (batches
of 2000 keys: one round trip each for both).

The imitation is checked against scrapy-redis's own class (if installed), at
``--dupefilter-urls`` URLs (50,000 by default: ~20 s, one round trip each): a
``scrapy_redis.dupefilter.RFPDupeFilter`` on the same server, fed
``scrapy.Request`` objects through ``request_seen`` as its scheduler does (its
own fingerprint: the SHA1 of the method, canonical URL and body, as JSON), then
the imitation at the same count; the bytes per URL should match. Its time
includes the fingerprints and a round trip per request.

    PYTHONPATH=. python benchmarks/bench_fleet_seen.py [--urls 1000000 10000000]
        [--dupefilter-urls 50000]    # 0: not checked
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from redis_server import REDIS_SERVER, SKIP_REASON, redis_server  # noqa: E402

from scrapy_aimd.fingerprint import AimdRequestFingerprinter  # noqa: E402
from scrapy_aimd.fleet import Fleet, FleetSeenSet  # noqa: E402
from scrapy_aimd.fleet.connection import DEFAULT_BUCKETS  # noqa: E402

BATCH = 2000
TARGET = 16.0


def urls(count: int) -> Iterator[str]:
    """Distinct URLs over a few thousand hosts, with paths and queries."""
    for n in range(count):
        yield f"http://site{n % 5000}.example/section/{n // 5000}/page?id={n}&sort=asc"


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def measure_aimd(url: str, count: int) -> tuple[float, float, int]:
    """Bytes per URL, seconds, and buckets that are not intsets."""
    client = redis.Redis.from_url(url)
    client.flushall()
    fleet = Fleet(url, "bench:aimd", rules_id="bench")
    seen = FleetSeenSet(fleet)
    fingerprinter = AimdRequestFingerprinter()
    keys = [fingerprinter.url_key("GET", link) for link in urls(count)]
    before = used_memory(client)
    started = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for start in range(0, count, BATCH):
        # As push.lua adds a pushed request's key: its bucket, its remaining bits.
        for key in keys[start : start + BATCH]:
            bucket, member = seen.bucket_and_member(key)
            pipe.sadd(f"bench:aimd:s:{bucket}", member)
        pipe.execute()
    elapsed = time.perf_counter() - started
    grown = used_memory(client) - before
    for bucket in range(seen.buckets):
        pipe.scard(f"bench:aimd:s:{bucket:x}")
    added = sum(pipe.execute())
    assert added == count, (added, count)
    step = max(1, seen.buckets // 256)
    encodings = [
        client.object("encoding", f"bench:aimd:s:{bucket:x}")
        for bucket in range(0, seen.buckets, step)
    ]
    not_intsets = sum(encoding not in (None, b"intset") for encoding in encodings)
    fleet.close()
    client.close()
    return grown / count, elapsed, not_intsets


def measure_sha1_set(url: str, count: int) -> tuple[float, float]:
    """scrapy-redis's dupefilter: hex SHA1 strings in one set."""
    client = redis.Redis.from_url(url)
    client.flushall()
    digests = [hashlib.sha1(b"GET" + link.encode()).hexdigest() for link in urls(count)]
    before = used_memory(client)
    started = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for start in range(0, count, BATCH):
        for digest in digests[start : start + BATCH]:
            pipe.sadd("bench:dupefilter", digest)
        pipe.execute()
    elapsed = time.perf_counter() - started
    grown = used_memory(client) - before
    assert client.scard("bench:dupefilter") == count
    client.close()
    return grown / count, elapsed


def measure_rfp_dupefilter(url: str, count: int) -> tuple[float, float]:
    """scrapy-redis's own ``RFPDupeFilter``, as its scheduler calls it."""
    import scrapy
    from scrapy_redis.dupefilter import RFPDupeFilter

    client = redis.Redis.from_url(url)
    client.flushall()
    requests = [scrapy.Request(link) for link in urls(count)]
    dupefilter = RFPDupeFilter(client, key="bench:rfp")
    before = used_memory(client)
    started = time.perf_counter()
    seen = sum(dupefilter.request_seen(request) for request in requests)
    elapsed = time.perf_counter() - started
    grown = used_memory(client) - before
    assert not seen and client.scard("bench:rfp") == count, (seen, count)
    member = client.srandmember("bench:rfp")
    assert isinstance(member, bytes) and len(member) == 40, member  # as the imitation's
    client.close()
    return grown / count, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--dupefilter-urls", type=int, default=50_000)
    args = parser.parse_args()
    if REDIS_SERVER is None:
        print(SKIP_REASON)
        return 1
    check = args.dupefilter_urls
    if check and importlib.util.find_spec("scrapy_redis") is None:
        print("scrapy-redis is not installed: its RFPDupeFilter is not compared")
        check = 0
    rows = []
    real: tuple[float, float, float, float] | None = None
    with redis_server("--maxmemory", "0") as server:
        version = redis.Redis.from_url(server.url).info("server")["redis_version"]
        for count in args.urls:
            ours, ours_time, not_intsets = measure_aimd(server.url, count)
            theirs, theirs_time = measure_sha1_set(server.url, count)
            rows.append((count, ours, ours_time, not_intsets, theirs, theirs_time))
        if check:
            real = (
                *measure_rfp_dupefilter(server.url, check),
                *measure_sha1_set(server.url, check),
            )
    print(f"Seen set in Redis {version}: used_memory growth per URL (target <= {TARGET:g} B)")
    print(f"scrapy-aimd: {DEFAULT_BUCKETS} buckets; scrapy-redis: 40-char hex SHA1s in a set\n")
    print("| URLs | scrapy-aimd B/URL | time | buckets not intsets | scrapy-redis B/URL | time |")
    print("|---:|---:|---:|---:|---:|---:|")
    for count, ours, ours_time, not_intsets, theirs, theirs_time in rows:
        print(
            f"| {count:,} | {ours:.1f} | {ours_time:.1f} s | {not_intsets} of 256 sampled"
            f" | {theirs:.1f} | {theirs_time:.1f} s |"
        )
    for count, ours, *_ in rows:
        verdict = "met" if ours <= TARGET else "NOT met"
        print(f"\nAt {count:,} URLs the target of {TARGET:g} B/URL is {verdict}.", end="")
    print(" (Below ~300 k URLs the buckets' own overhead dominates.)")
    if real is not None:
        rfp, rfp_time, imitation, imitation_time = real
        print(f"\nThe imitation against scrapy-redis's own RFPDupeFilter, at {check:,} URLs:\n")
        print("| URLs | RFPDupeFilter B/URL | time | imitation (SADD of hex SHA1s) B/URL | time |")
        print("|---:|---:|---:|---:|---:|")
        print(
            f"| {check:,} | {rfp:.1f} | {rfp_time:.1f} s | {imitation:.1f}"
            f" | {imitation_time:.1f} s |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
