"""Committed group offsets and pending transactional offsets, with retention.

One store for every group of the broker, shared by the group coordinator (plain
commits, fetches, retention) and the transaction coordinator (transactional commits
stay pending per (group, producer id) until the transaction ends).

Contract:
1. ``commit`` makes offsets visible at once; ``add_pending`` keeps them pending, invisible to
   ``fetch`` (which only reports that a commit is pending, for KIP-447's
   ``require_stable``) until ``complete`` applies (commit) or drops (abort) them.
2. Every change is journaled before it is applied, so replaying the journal
   (``apply``) rebuilds the same state.
3. ``expire`` removes committed offsets whose retention has passed (see
   :meth:`OffsetStore.expire` for the rule, which is Kafka's since 2.1, KIP-211); pending
   transactional offsets never expire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._clock import Clock
from ._journal import Entry, Journal

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class CommittedOffset:
    """One committed (or pending) offset of a group for one partition."""

    offset: int
    metadata: str | None
    leader_epoch: int
    commit_ms: int
    # Absolute expiry asked by OffsetCommit v2-v4's retention_time_ms; None: broker retention.
    expire_ms: int | None = None


Offsets = dict[TopicPartition, CommittedOffset]


class OffsetStore:
    """Committed and pending offsets of every group (see the module docstring)."""

    def __init__(self, journal: Journal, clock: Clock) -> None:
        self._journal = journal
        self._clock = clock
        self._committed: dict[str, Offsets] = {}
        self._pending: dict[str, dict[int, Offsets]] = {}

    # ---- persistence -------------------------------------------------------------
    def apply(self, entry: Entry) -> bool:
        """Apply a replayed journal entry; False if it is not an offsets entry."""
        kind = entry["t"]
        if kind == "off":
            self._committed.setdefault(entry["g"], {}).update(self._unpack(entry["o"]))
        elif kind == "toff":
            pending = self._pending.setdefault(entry["g"], {})
            pending.setdefault(entry["pid"], {}).update(self._unpack(entry["o"]))
        elif kind == "toff_end":
            self._finish(entry["g"], entry["pid"], entry["c"])
        elif kind == "off_del":
            self._drop(entry["g"], [(t, p) for t, p in entry["o"]])
        elif kind == "group_del":
            self._committed.pop(entry["g"], None)
            self._pending.pop(entry["g"], None)
        else:
            return False
        return True

    def snapshot(self) -> list[Entry]:
        """Journal entries recreating every committed and pending offset."""
        out: list[Entry] = [
            {"t": "off", "g": g, "o": _pack(offsets)}
            for g, offsets in self._committed.items()
            if offsets
        ]
        out.extend(
            {"t": "toff", "g": g, "pid": pid, "o": _pack(offsets)}
            for g, by_pid in self._pending.items()
            for pid, offsets in by_pid.items()
        )
        return out

    def _unpack(self, rows: list[list[Any]]) -> Offsets:
        out: Offsets = {}
        for row in rows:
            topic, partition, offset, metadata, leader_epoch = row[:5]
            # Entries written before commit times were journaled count from their replay.
            commit_ms = row[5] if len(row) > 5 else self._clock.wall_ms()
            expire_ms = row[6] if len(row) > 6 else None
            out[(topic, partition)] = CommittedOffset(
                offset=offset,
                metadata=metadata,
                leader_epoch=leader_epoch,
                commit_ms=commit_ms,
                expire_ms=expire_ms,
            )
        return out

    # ---- writes ------------------------------------------------------------------
    def commit(self, group: str, offsets: Offsets) -> None:
        """Store plain committed offsets (visible at once)."""
        self._journal.append({"t": "off", "g": group, "o": _pack(offsets)})
        self._committed.setdefault(group, {}).update(offsets)

    def add_pending(self, group: str, producer_id: int, offsets: Offsets) -> None:
        """Keep transactional offsets pending until :meth:`complete`."""
        self._journal.append({"t": "toff", "g": group, "pid": producer_id, "o": _pack(offsets)})
        self._pending.setdefault(group, {}).setdefault(producer_id, {}).update(offsets)

    def complete(self, group: str, producer_id: int, commit: bool) -> None:
        """Apply (commit) or drop (abort) a producer's pending offsets for ``group``."""
        self._journal.append({"t": "toff_end", "g": group, "pid": producer_id, "c": commit})
        self._finish(group, producer_id, commit)

    def _finish(self, group: str, producer_id: int, commit: bool) -> None:
        by_pid = self._pending.get(group)
        if by_pid is None:
            return
        offsets = by_pid.pop(producer_id, {})
        if not by_pid:
            del self._pending[group]
        if commit and offsets:
            self._committed.setdefault(group, {}).update(offsets)

    def delete_group(self, group: str) -> None:
        """Forget every offset of ``group`` (DeleteGroups)."""
        self._journal.append({"t": "group_del", "g": group})
        self._committed.pop(group, None)
        self._pending.pop(group, None)

    def expire(
        self, group: str, now_ms: int, retention_ms: int, empty_since_ms: int | None
    ) -> list[TopicPartition]:
        """Remove and return the committed offsets of ``group`` whose retention has passed.

        The caller only asks for groups without members. An offset committed with an
        explicit expiry (OffsetCommit v2-v4) goes at that time. Otherwise it goes
        ``retention_ms`` after the group became empty (``empty_since_ms``, for groups
        that had members) or, for groups that never had members, after its own commit.
        """
        committed = self._committed.get(group, {})
        gone = []
        for tp, value in committed.items():
            if value.expire_ms is not None:
                expired = now_ms >= value.expire_ms
            else:
                base = value.commit_ms if empty_since_ms is None else empty_since_ms
                expired = now_ms - base >= retention_ms
            if expired:
                gone.append(tp)
        if gone:
            self._journal.append({"t": "off_del", "g": group, "o": [list(tp) for tp in gone]})
            self._drop(group, gone)
        return gone

    def _drop(self, group: str, partitions: list[TopicPartition]) -> None:
        committed = self._committed.get(group)
        if committed is None:
            return
        for tp in partitions:
            committed.pop(tp, None)
        if not committed:
            del self._committed[group]

    # ---- reads -------------------------------------------------------------------
    def fetch(self, group: str, tp: TopicPartition) -> tuple[CommittedOffset | None, bool]:
        """Return (committed offset or None, whether a transactional commit is pending)."""
        unstable = any(tp in offsets for offsets in self._pending.get(group, {}).values())
        return self._committed.get(group, {}).get(tp), unstable

    def partitions(self, group: str) -> list[TopicPartition]:
        """Every partition with a committed offset in ``group``, sorted."""
        return sorted(self._committed.get(group, {}))

    def groups(self) -> list[str]:
        """Every group holding committed or pending offsets."""
        return sorted(set(self._committed) | set(self._pending))

    def has_group(self, group: str) -> bool:
        """Whether ``group`` holds committed or pending offsets."""
        return group in self._committed or group in self._pending


def _pack(offsets: Offsets) -> list[list[Any]]:
    return [
        [t, p, v.offset, v.metadata, v.leader_epoch, v.commit_ms, v.expire_ms]
        for (t, p), v in offsets.items()
    ]
