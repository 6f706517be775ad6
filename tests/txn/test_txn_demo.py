"""The demo runs and its exactly-once check passes (and can fail)."""

from __future__ import annotations

from txn import demo
from txn.testing import MemoryStore
from txn.testing._store import Commit


def test_demo_passes() -> None:
    assert demo.main(["--epochs", "4", "--seed", "3"]) == 0


def test_demo_check_flags_a_duplicate() -> None:
    store = MemoryStore()
    store.commits = [Commit(0, 0, tuple(demo.rows_of(0))), Commit(0, 0, ())]
    rows = [demo._EpochRow(epoch=0, crash="-", restarts=0, attempts=1)]
    demo._check(store, rows)
    assert not rows[0].ok and rows[0].notes == ["a partition committed twice"]
