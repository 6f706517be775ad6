"""The crash world of the in-memory participants: the txn core's own crash matrix.

Durable: the epoch log file and the :class:`MemoryStore` (the external system; ``MIXED``:
one per member). In-process (dropped at every crash): the :class:`FileEpochLog` handle,
the resource, the coordinator, the channel. How a connector writes its own world:
:class:`CrashWorld`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from txn._composite import CompositeResource, Member
from txn._log import EpochLog, FileEpochLog
from txn._model import EpochPlan, Resource
from txn.testing._crash import KAFKA_LIKE, MIXED, CrashWorld, _require
from txn.testing._participants import (
    CommitInTaskResource,
    MemRows,
    OnePassRows,
    PreparedResource,
    partition_rows,
)
from txn.testing._store import MemoryStore

MIXED_SPLIT = (2, 2)  # write partitions of the Kafka-like and the PG-like member
SINK = "sink-a"
ROWS_PER_EPOCH = 12


def epoch_rows(epoch: int) -> list[str]:
    """Return the rows every partition of ``epoch`` writes together (distinct across epochs)."""
    return [f"e{epoch}-r{i}" for i in range(ROWS_PER_EPOCH)]


@dataclass
class MemoryWorld(CrashWorld[MemRows]):
    """``kind`` participants over in-memory stores; the log is ``tmp_path/epochs.log``."""

    tmp_path: Path
    kind: str
    store: MemoryStore = field(default_factory=MemoryStore, kw_only=True)
    pg_store: MemoryStore = field(  # MIXED: the PG-like member
        default_factory=MemoryStore, kw_only=True)

    @property
    def log_path(self) -> Path:
        """Open the epoch log file."""
        return self.tmp_path / "epochs.log"

    def __post_init__(self) -> None:
        if self.kind == MIXED:
            self.parallelism = sum(MIXED_SPLIT)

    def open_log(self) -> EpochLog:
        """Open the epoch log file."""
        return FileEpochLog(self.log_path, sink_id=self.sink_id)

    def new_resource(self, fingerprint: str = "v1") -> Resource[MemRows]:
        """Return the resource of ``kind`` over the stores."""
        if self.kind == KAFKA_LIKE:
            return CommitInTaskResource(self.store, fingerprint)
        if self.kind == MIXED:
            return CompositeResource([
                Member(CommitInTaskResource(self.store, fingerprint), MIXED_SPLIT[0]),
                Member(PreparedResource(self.pg_store, fingerprint), MIXED_SPLIT[1]),
            ])
        return PreparedResource(self.store, fingerprint)

    def rows_for(self, plan: EpochPlan, partition: int) -> OnePassRows:
        """Return the rows of a write partition: each member writes every row of the epoch."""
        if self.kind == MIXED:
            member, local = (0, partition) if partition < MIXED_SPLIT[0] else (
                1, partition - MIXED_SPLIT[0])
            return OnePassRows(partition_rows(epoch_rows(plan.epoch), MIXED_SPLIT[member])[local])
        return OnePassRows(partition_rows(epoch_rows(plan.epoch), plan.parallelism)[partition])

    def check_atomic(self) -> str:
        """Return what a recovery left partly committed ("" if nothing).

        A prepared (2PC) store holds every epoch all-or-nothing; mixed: the PG-like store
        never shows an epoch the Kafka-like store does not fully hold.
        """
        if self.kind == KAFKA_LIKE:
            return ""
        pg = self.pg_store if self.kind == MIXED else self.store
        by_epoch: dict[int, set[int]] = {}
        for commit in pg.commits:
            by_epoch.setdefault(commit.epoch, set()).add(commit.partition)
        history = self.history()
        bad = []
        for epoch, parts in by_epoch.items():
            plan = history.plan(epoch)
            width = MIXED_SPLIT[1] if self.kind == MIXED else (plan.parallelism if plan else -1)
            if parts != set(range(width)):
                bad.append(epoch)
        if self.kind == MIXED:
            kafka = self.store.rows_by_epoch()
            bad += [e for e in by_epoch if sorted(kafka.get(e, [])) != sorted(epoch_rows(e))]
        return f"partly committed epochs after recovery: {bad}" if bad else ""

    def check_exactly_once(self, epochs: int) -> None:
        """Every epoch's rows once in each store, no partition committed twice, none open."""
        stores = [self.store, self.pg_store] if self.kind == MIXED else [self.store]
        for store in stores:
            per_commit = Counter((c.epoch, c.partition) for c in store.commits)
            twice = {k: v for k, v in per_commit.items() if v > 1}
            _require(not twice, f"partitions committed more than once: {twice}")
            got = store.rows_by_epoch()
            for epoch in range(epochs):
                _require(sorted(got.get(epoch, [])) == sorted(epoch_rows(epoch)),
                         f"epoch {epoch} holds {sorted(got.get(epoch, []))}")
            extra = set(got) - set(range(epochs))
            _require(not extra, f"unexpected epochs {extra}")
            _require(store.dangling() == [], f"open or prepared work left: {store.dangling()}")
        self.check_log(epochs)
