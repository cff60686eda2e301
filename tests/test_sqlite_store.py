"""SqliteQueueStore: the memory store's order, rows that outlive the process,
and clear errors for files that are not its own."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_aimd.core.controller import ControllerConfig, HostController
from scrapy_aimd.core.frontier import Frontier, MemoryQueueStore, SortKey
from scrapy_aimd.sqlite_store import FORMAT, SqliteQueueStore, StoreError

ROOT = Path(__file__).resolve().parent.parent


def encode(item: str) -> bytes | None:
    """Items starting with "mem" cannot be serialized."""
    return None if item.startswith("mem") else item.encode()


def decode(data: bytes) -> str:
    if data.startswith(b"bad"):
        raise ValueError("unreadable")
    return data.decode()


def open_store(path: Path, **stamp: str) -> SqliteQueueStore[str]:
    return SqliteQueueStore(path, encode=encode, decode=decode, stamp=stamp or {"spider": "s"})


def drain(store: SqliteQueueStore[str], host: str) -> list[str]:
    items = []
    while (item := store.pop(host)) is not None:
        items.append(item)
    return items


ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from("abc"), st.integers(-2, 2), st.integers(0, 3)),
        st.tuples(st.just("pop"), st.sampled_from("abc")),
        st.tuples(st.just("done")),
        st.tuples(st.just("reopen")),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(operations=ops)
def test_items_come_out_as_from_the_memory_store(
    tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[object, ...]]
) -> None:
    """Same order as MemoryQueueStore; reopened, the store has queued again what
    was popped and not done, and lost what it kept in memory."""
    path = tmp_path_factory.mktemp("store") / "f.sqlite"
    store = open_store(path)
    model: MemoryQueueStore[str] = MemoryQueueStore()
    popped: list[tuple[str, SortKey, str]] = []
    for arrival, op in enumerate(operations):
        if op[0] == "push":
            host, priority, depth = str(op[1]), int(op[2]), int(op[3])  # type: ignore[call-overload]
            item = f"{host}{arrival}" if arrival % 5 else f"mem{host}{arrival}"
            store.push(host, (priority, depth, arrival), item)
            model.push(host, (priority, depth, arrival), item)
        elif op[0] == "pop":
            host = str(op[1])
            key = model.head(host)
            expected = model.pop(host)
            assert store.pop(host) == expected
            if expected is not None and key is not None:
                popped.append((host, key, expected))
        elif op[0] == "done" and popped:
            store.done(popped.pop(0)[2])
        elif op[0] == "reopen":
            store.close()
            store = open_store(path)
            survivors = list(popped)
            for host in "abc":
                while (key := model.head(host)) is not None:
                    item = model.pop(host)
                    assert item is not None
                    survivors.append((host, key, item))
            model, popped = MemoryQueueStore(), []
            for host, key, item in survivors:
                if not item.startswith("mem"):  # what was in memory only is gone
                    model.push(host, key, item)
        for host in "abc":
            assert store.head(host) == model.head(host)
            assert store.count(host) == model.count(host)
        assert len(store) == len(model)
    store.close()


def test_popped_items_stay_until_done(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    for i in range(4):
        store.push("a", (0, 0, i), f"a{i}")
    assert store.pop("a") == "a0"
    assert store.pop("a") == "a1"
    store.done("a1")
    assert len(store) == 2 and store.held == 1
    store.close()
    again = open_store(path)
    assert again.restored == 3
    assert drain(again, "a") == ["a0", "a2", "a3"]
    again.close()


def test_kept_items_are_queued_for_their_host_when_reopened(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    store.keep("a", (0, 1, 0), "waiting")
    store.keep("a", (0, 1, 0), "waiting")  # kept once
    store.keep("b", (0, 0, 1), "moved")
    store.push("b", (0, 0, 2), "moved")  # queued again: its kept row goes
    store.keep("c", (0, 0, 3), "finished")
    store.done("finished")
    assert len(store) == 1 and store.count("a") == 0
    store.close()
    again = open_store(path)
    assert drain(again, "a") == ["waiting"]
    assert drain(again, "b") == ["moved"]
    assert drain(again, "c") == []
    again.close()


def test_a_popped_item_queued_again_is_stored_once(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    store.push("a", (0, 0, 0), "x")
    assert store.pop("a") == "x"
    store.push("a", (0, 0, 1), "x")  # e.g. parked at pop time, then allowed
    store.done("x")  # a no-op now: the popped row went with the push
    store.close()
    again = open_store(path)
    assert drain(again, "a") == ["x"]
    again.close()


def test_unserializable_items_stay_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    store.push("a", (0, 0, 0), "a0")
    store.push("a", (-1, 0, 1), "mem-urgent")
    store.keep("a", (0, 0, 2), "mem-kept")
    assert store.unserializable == 1
    assert store.count("a") == 2
    assert store.head("a") == (-1, 0, 1)
    assert drain(store, "a") == ["mem-urgent", "a0"]
    store.close()
    again = open_store(path)
    assert drain(again, "a") == ["a0"]
    again.close()


def test_an_unreadable_row_is_skipped_and_left_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    store.push("a", (0, 0, 0), "bad row")
    store.push("a", (0, 0, 1), "a1")
    assert store.pop("a") == "a1"
    assert store.pop("a") is None
    assert store.undecodable == 1
    store.close()
    again = open_store(path)
    assert again.restored == 2
    again.close()


def test_arrival_numbers_continue_after_reopen(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    store.push("a", (0, 0, 41), "a41")
    store.keep("b", (0, 0, 57), "b57")
    store.done("b57")
    store.close()
    again = open_store(path)
    assert again.next_arrival() == 58
    again.close()


def test_states_are_saved_with_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    assert store.load_state("host:a") is None
    store.save_state("host:a", {"delay": 1.5, "paused_until": None})
    store.save_state("host:a", {"delay": 2.0})
    store.close()
    again = open_store(path)
    assert again.load_state("host:a") == {"delay": 2.0}
    again.close()


KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from scrapy_aimd.sqlite_store import SqliteQueueStore
    store = SqliteQueueStore(sys.argv[1], encode=str.encode, decode=bytes.decode)
    for i in range(1000):
        store.push(f"h{i % 7}", (0, 0, i), f"item{i}")
    assert store.pop("h0") == "item0"
    store.commit()
    store.push("h1", (0, 0, 5000), "uncommitted")
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_killed_process_keeps_what_it_committed(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    result = subprocess.run(
        [sys.executable, "-c", KILLED, str(path)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == -9, result.stderr
    store = SqliteQueueStore(path, encode=str.encode, decode=bytes.decode)
    assert store.restored == 1000
    items = [item for host in sorted(store.queued_hosts()) for item in drain(store, host)]  # type: ignore[arg-type]
    assert sorted(items) == sorted(f"item{i}" for i in range(1000))
    store.close()


def test_an_empty_file_is_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    path.touch()
    store = open_store(path)
    assert store.created
    store.close()


def test_another_kind_of_file_is_refused_naming_it(tmp_path: Path) -> None:
    text = tmp_path / "text.sqlite"
    text.write_text("hello\n" * 100)
    with pytest.raises(StoreError, match=f"{text} is not a scrapy-aimd frontier"):
        open_store(text)
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match=f"{other} is not a scrapy-aimd frontier"):
        open_store(other)


def test_another_format_or_crawl_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    open_store(path, spider="one").close()
    with pytest.raises(StoreError, match=f"{path} belongs to another crawl"):
        open_store(path, spider="two")
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={FORMAT + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(
        StoreError, match=f"{path} is a scrapy-aimd frontier of format {FORMAT + 1}"
    ):
        open_store(path, spider="one")


def test_a_corrupted_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    for i in range(3000):
        store.push(f"h{i % 40}", (0, i % 3, i), f"item {i} " + "x" * 100)
    store.close()
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    for page in range(3, len(data) // page_size, 5):  # b-tree page headers
        data[page * page_size : page * page_size + 12] = b"\xff" * 12
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=f"{path} is corrupted"):
        open_store(path)


def test_one_crawl_per_file(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    script = textwrap.dedent(
        """
        import sys
        from scrapy_aimd.sqlite_store import SqliteQueueStore, StoreError
        try:
            stamp = {"spider": "s"}
            SqliteQueueStore(sys.argv[1], encode=str.encode, decode=bytes.decode, stamp=stamp)
        except StoreError as exc:
            print(exc)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    store.close()
    assert f"{path} is in use by another crawl" in result.stdout, result


def test_a_frontier_over_a_reopened_store_files_its_hosts(tmp_path: Path) -> None:
    cfg = ControllerConfig(min_delay=0.0, max_concurrency=4, adaptive=False)
    path = tmp_path / "f.sqlite"
    store = open_store(path)
    frontier: Frontier[str] = Frontier(lambda host: HostController(cfg), store)
    frontier.push("a", "a-deep", depth=3, now=0.0)
    frontier.push("b", "b-shallow", depth=1, now=0.0)
    frontier.push("c", "c-urgent", depth=5, priority=10, now=0.0)
    popped = frontier.pop(0.0)
    assert popped is not None and popped.item == "c-urgent"
    store.close()
    store = open_store(path)
    frontier = Frontier(lambda host: HostController(cfg), store)
    assert frontier.restore(0.0) == 3
    frontier.push("a", "a-root", depth=0, now=0.0)
    order = []
    while (popped := frontier.pop(0.0)) is not None:
        order.append(popped.item)
    assert order == ["c-urgent", "a-root", "b-shallow", "a-deep"]
    store.close()


def test_thousands_of_unreadable_rows_are_skipped_in_a_loop(tmp_path: Path) -> None:
    # A renamed callback makes every stored request of a resumed crawl unreadable;
    # skipping them must neither recurse nor reread them.
    store = open_store(tmp_path / "f.sqlite")
    for arrival in range(3000):
        store.push("a", (0, 0, arrival), f"bad row {arrival}")
    store.push("a", (0, 0, 3000), "a3000")
    assert store.pop("a") == "a3000"
    assert store.pop("a") is None
    assert store.undecodable == 3000
    store.close()
