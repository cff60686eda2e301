"""``SqliteQueueStore.check``: what opening a frontier file would refuse, said
before the crawl starts, without writing to the file."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_sqlite_store import KILLED

from scrapy_aimd.sqlite_store import FORMAT, SqliteQueueStore, StoreError

ROOT = Path(__file__).resolve().parent.parent


def open_store(path: Path, spider: str = "s") -> SqliteQueueStore[str]:
    return SqliteQueueStore(path, encode=str.encode, decode=bytes.decode, stamp={"spider": spider})


def filled(path: Path) -> Path:
    store = open_store(path)
    for i in range(3000):
        store.push(f"h{i % 40}", (0, 0, i), f"item {i} " + "x" * 100)
    store.close()
    return path


def test_a_missing_or_empty_file_passes_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sqlite"
    SqliteQueueStore.check(missing, stamp={"spider": "s"})
    assert not missing.exists()
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    SqliteQueueStore.check(empty)


def test_a_good_file_passes_and_opens_as_before(tmp_path: Path) -> None:
    path = filled(tmp_path / "f.sqlite")
    SqliteQueueStore.check(path, stamp={"spider": "s"})
    SqliteQueueStore.check(path)  # without a stamp, any crawl's
    store = open_store(path)
    assert store.restored == 3000
    store.close()


def test_each_refusal_of_opening_is_said_by_check(tmp_path: Path) -> None:
    text = tmp_path / "text.sqlite"
    text.write_text("hello\n" * 100)
    with pytest.raises(StoreError, match=f"{text} is not a scrapy-aimd frontier"):
        SqliteQueueStore.check(text)
    path = filled(tmp_path / "f.sqlite")
    with pytest.raises(StoreError, match=f"{path} belongs to another crawl"):
        SqliteQueueStore.check(path, stamp={"spider": "other"})
    store = open_store(path)
    with pytest.raises(StoreError, match=f"{path} is in use by another crawl"):
        SqliteQueueStore.check(path)
    store.close()
    with path.open("r+b") as file:
        file.truncate(path.stat().st_size // 2)
    with pytest.raises(StoreError, match=f"{path} is corrupted"):
        SqliteQueueStore.check(path)
    newer = filled(tmp_path / "newer.sqlite")
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version={FORMAT + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match=f"{newer} is a scrapy-aimd frontier of format"):
        SqliteQueueStore.check(newer)


def test_the_files_of_a_killed_crawl_pass_and_keep_every_row(tmp_path: Path) -> None:
    """A crawl killed with SIGKILL leaves its last commits in the write-ahead log;
    the check (whose connection folds the log into the file as it closes) keeps them."""
    path = tmp_path / "f.sqlite"
    result = subprocess.run(
        [sys.executable, "-c", KILLED, str(path)], cwd=ROOT, capture_output=True, timeout=60
    )
    assert result.returncode == -9, result.stderr
    assert Path(f"{path}-wal").exists()
    SqliteQueueStore.check(path)
    store = SqliteQueueStore(path, encode=str.encode, decode=bytes.decode)
    assert store.restored == 1000
    store.close()
