"""OffsetStore: visibility of plain and transactional commits, journal replay, retention."""

from pathlib import Path

import pytest

from minikafka._journal import Journal
from minikafka._offsets import CommittedOffset, OffsetStore
from tests.minikafka.clock import ManualClock

TP = ("t", 0)
DAY_MS = 24 * 3600 * 1000


def _store(tmp_path: Path | None = None, clock: ManualClock | None = None) -> OffsetStore:
    journal = Journal(tmp_path / "journal.bin" if tmp_path else None, fsync=False)
    journal.rewrite([])
    return OffsetStore(journal, clock or ManualClock())


def _at(offset: int, commit_ms: int = 0, expire_ms: int | None = None) -> CommittedOffset:
    return CommittedOffset(
        offset=offset,
        metadata=f"m{offset}",
        leader_epoch=-1,
        commit_ms=commit_ms,
        expire_ms=expire_ms,
    )


def test_plain_commit_is_visible_at_once():
    store = _store()
    store.commit("g", {TP: _at(5)})
    assert store.fetch("g", TP) == (_at(5), False)
    assert store.partitions("g") == [TP] and store.groups() == ["g"]
    assert store.fetch("other", TP) == (None, False)


def test_transactional_offsets_stay_pending_until_commit_and_vanish_on_abort():
    store = _store()
    store.commit("g", {TP: _at(1)})
    store.add_pending("g", 77, {TP: _at(9)})
    assert store.fetch("g", TP) == (_at(1), True), "pending offsets are invisible, but flagged"
    store.complete("g", 77, commit=False)
    assert store.fetch("g", TP) == (_at(1), False)
    store.add_pending("g", 77, {TP: _at(11)})
    store.complete("g", 77, commit=True)
    assert store.fetch("g", TP) == (_at(11), False)


def test_pending_offsets_alone_make_a_group_exist():
    store = _store()
    store.add_pending("g", 5, {TP: _at(3)})
    assert store.has_group("g") and store.partitions("g") == []
    store.complete("g", 5, commit=False)
    assert not store.has_group("g")


def test_journal_replay_rebuilds_the_same_state(tmp_path):
    clock = ManualClock()
    store = _store(tmp_path, clock)
    store.commit("g", {TP: _at(1, 10), ("t", 1): _at(2, 10)})
    store.add_pending("g", 7, {TP: _at(4, 20)})
    store.add_pending("h", 8, {TP: _at(6, 20)})
    store.complete("h", 8, commit=True)
    store.expire("g", now_ms=10 + DAY_MS, retention_ms=DAY_MS, empty_since_ms=None)
    replayed = OffsetStore(Journal(tmp_path / "journal.bin", fsync=False), clock)
    for entry in Journal(tmp_path / "journal.bin", fsync=False).replay():
        assert replayed.apply(entry)
    for group in ("g", "h"):
        for tp in (TP, ("t", 1)):
            assert replayed.fetch(group, tp) == store.fetch(group, tp)
    assert replayed.snapshot() == store.snapshot()


def test_entries_without_commit_time_count_from_their_replay():
    clock = ManualClock()
    store = OffsetStore(Journal(None, fsync=False), clock)
    assert store.apply({"t": "off", "g": "g", "o": [["t", 0, 4, "m", -1]]})
    value, _ = store.fetch("g", TP)
    assert value == CommittedOffset(
        offset=4, metadata="m", leader_epoch=-1, commit_ms=clock.wall_ms(), expire_ms=None
    )


def test_retention_of_a_group_that_never_had_members_counts_from_each_commit():
    store = _store()
    store.commit("g", {TP: _at(1, commit_ms=0), ("t", 1): _at(2, commit_ms=500)})
    assert store.expire("g", now_ms=999, retention_ms=1000, empty_since_ms=None) == []
    assert store.expire("g", now_ms=1000, retention_ms=1000, empty_since_ms=None) == [TP]
    assert store.partitions("g") == [("t", 1)]
    assert store.expire("g", now_ms=1500, retention_ms=1000, empty_since_ms=None) == [("t", 1)]
    assert not store.has_group("g")


def test_retention_of_an_emptied_group_counts_from_when_it_became_empty():
    store = _store()
    store.commit("g", {TP: _at(1, commit_ms=0)})
    assert store.expire("g", now_ms=5000, retention_ms=1000, empty_since_ms=4500) == []
    assert store.expire("g", now_ms=5500, retention_ms=1000, empty_since_ms=4500) == [TP]


def test_explicit_expiry_of_old_commit_versions_wins():
    store = _store()
    store.commit("g", {TP: _at(1, commit_ms=0, expire_ms=100)})
    assert store.expire("g", now_ms=100, retention_ms=DAY_MS, empty_since_ms=None) == [TP]


def test_pending_transactional_offsets_never_expire():
    store = _store()
    store.add_pending("g", 3, {TP: _at(1, commit_ms=0)})
    assert store.expire("g", now_ms=10 * DAY_MS, retention_ms=1, empty_since_ms=None) == []
    store.complete("g", 3, commit=True)
    assert store.fetch("g", TP)[0] == _at(1, commit_ms=0)


@pytest.mark.parametrize("pending", [False, True])
def test_delete_group_drops_committed_and_pending(pending):
    store = _store()
    store.commit("g", {TP: _at(1)})
    if pending:
        store.add_pending("g", 3, {TP: _at(2)})
    store.delete_group("g")
    assert not store.has_group("g") and store.fetch("g", TP) == (None, False)
