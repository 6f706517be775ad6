"""The crash world of the in-memory participants: the txn core's own crash matrix.

Durable: the epoch log file and the :class:`MemoryStore` (the external system; ``MIXED``:
one per member). In-process (dropped at every crash): the :class:`FileEpochLog` handle,
the resource, the coordinator, the executor. How a connector writes its own world:
:class:`CrashWorld`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from txn._composite import CompositeResource, Member
from txn._log import EpochLog, FileEpochLog
from txn._model import EpochPlan, Guarantee, Resource
from txn._steps import CoordinatorStep
from txn.testing._crash import FULL, KAFKA_LIKE, MIXED, CrashWorld, _require, epoch_size
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


def epoch_rows(epoch: int, shape: str = FULL) -> list[str]:
    """Return the rows every partition of ``epoch`` writes together (distinct across epochs)."""
    return [f"e{epoch}-r{i}" for i in range(epoch_size(epoch, shape, ROWS_PER_EPOCH))]


@dataclass(kw_only=True)
class Loss:
    """Prepared work of write ``partition`` of ``epoch`` rolled back by hand at ``step``."""

    epoch: int = 1
    partition: int = 0
    step: CoordinatorStep = CoordinatorStep.DECISION_LOGGED
    fired: bool = False


@dataclass(kw_only=True)
class MemoryWorld(CrashWorld[MemRows]):
    """``kind`` participants over in-memory stores; the log is ``tmp_path/epochs.log``."""

    tmp_path: Path
    kind: str
    store: MemoryStore = field(default_factory=MemoryStore, kw_only=True)
    pg_store: MemoryStore = field(  # MIXED: the PG-like member
        default_factory=MemoryStore, kw_only=True
    )
    shape: str = field(default=FULL, kw_only=True)  # of the epochs (txn.testing.SHAPES)
    losses: list[Loss] = field(default_factory=list, kw_only=True)

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
            return CompositeResource(
                [
                    Member(CommitInTaskResource(self.store, fingerprint), MIXED_SPLIT[0]),
                    Member(PreparedResource(self.pg_store, fingerprint), MIXED_SPLIT[1]),
                ]
            )
        return PreparedResource(self.store, fingerprint)

    def rows_for(self, plan: EpochPlan, partition: int) -> OnePassRows:
        """Return the rows of a write partition: each member writes every row of the epoch."""
        if self.kind == MIXED:
            member, local = (
                (0, partition) if partition < MIXED_SPLIT[0] else (1, partition - MIXED_SPLIT[0])
            )
            rows = partition_rows(self.rows_of(plan.epoch), MIXED_SPLIT[member])
            return OnePassRows(rows[local])
        return OnePassRows(partition_rows(self.rows_of(plan.epoch), plan.parallelism)[partition])

    def rows_of(self, epoch: int) -> list[str]:
        """Return every row of ``epoch`` (each member of a mixed resource writes all)."""
        return epoch_rows(epoch, self.shape)

    def on_coordinator_step(self, step: CoordinatorStep, epoch: int) -> None:
        """Fire the :class:`Loss` es planned for this step."""
        for loss in self.losses:
            if not loss.fired and (loss.step, loss.epoch) == (step, epoch):
                loss.fired = True
                self.lose_prepared(epoch, loss.partition)

    def lose_prepared(self, epoch: int, partition: int) -> None:
        """Roll back the prepared work of write ``partition`` of ``epoch`` by hand."""
        store, local = self.store, partition
        if self.kind == MIXED:
            store, local = self.pg_store, partition - MIXED_SPLIT[0]
        with store.lock:
            for key in [
                k for k, t in store.prepared.items() if (t.epoch, t.partition) == (epoch, local)
            ]:
                del store.prepared[key]

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
        lost = {loss.epoch for loss in self.losses if loss.fired}  # partly visible until redone
        for epoch, parts in by_epoch.items():
            if epoch in lost:
                continue
            plan = history.plan(epoch)
            width = MIXED_SPLIT[1] if self.kind == MIXED else (plan.parallelism if plan else -1)
            if parts != set(range(width)):
                bad.append(epoch)
        if self.kind == MIXED:
            kafka = self.store.rows_by_epoch()
            bad += [e for e in by_epoch if sorted(kafka.get(e, [])) != sorted(self.rows_of(e))]
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
                _require(
                    sorted(got.get(epoch, [])) == sorted(self.rows_of(epoch)),
                    f"epoch {epoch} holds {sorted(got.get(epoch, []))}",
                )
            extra = set(got) - set(range(epochs))
            _require(not extra, f"unexpected epochs {extra}")
            _require(store.dangling() == [], f"open or prepared work left: {store.dangling()}")
        self.check_log(epochs)
        if self.guarantee is Guarantee.EXACTLY_ONCE:
            self._check_every_partition_committed(stores, epochs)

    def _check_every_partition_committed(self, stores: list[MemoryStore], epochs: int) -> None:
        """Every write partition of every epoch committed its transaction, empty or not."""
        history = self.history()
        for index, store in enumerate(stores):
            want = {
                (e, p)
                for e in range(epochs)
                if (plan := history.plan(e)) is not None
                for p in range(MIXED_SPLIT[index] if self.kind == MIXED else plan.parallelism)
            }
            got = {(c.epoch, c.partition) for c in store.commits if c.epoch < epochs}
            _require(got == want, f"partitions committed or not: {sorted(got ^ want)}")
