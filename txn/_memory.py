"""In-memory participants of both kinds, for the protocol tests and ``python -m txn.demo``.

A :class:`MemoryStore` plays the external system (Kafka or PostgreSQL): it survives a
simulated crash, while every in-process object (coordinator, participants, channel) is
dropped. Two resources model the two participant kinds:

* :class:`CommitInTaskResource` (like Kafka): the task commits its own transaction; the
  marker is applied atomically with the data; opening a partition fences the previous
  instance and aborts its open transaction; nobody else can finish a transaction.
* :class:`PreparedResource` (like PostgreSQL): ``pre_commit`` prepares the transaction
  under a global id; the coordinator commits or rolls it back by id from "another process".

These are test doubles of the external systems, not connectors.
"""

from __future__ import annotations

import hashlib
import json
import threading
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from txn._errors import ParticipantError
from txn._model import EpochPlan, Marker, Participant, Resource, RowSummary

MemRows = Sequence[str]


class SimulatedCrash(BaseException):  # noqa: N818 - it is a crash, not an error
    """Raised by crash hooks: the process "dies" here, no cleanup code runs.

    A BaseException (not an Exception) so that ``except Exception`` blocks in the protocol
    do not treat it as an ordinary failure and abort on its behalf.
    """


class FencedError(ParticipantError):
    """A newer instance of the same partition was opened; this one must stop."""


def summarize_rows(rows: MemRows) -> RowSummary:
    """Row count and SHA-256 of the rows (order-sensitive)."""
    digest = hashlib.sha256(json.dumps(list(rows)).encode()).hexdigest()[:16]
    return RowSummary(len(rows), digest)


def partition_rows(rows: Sequence[str], parallelism: int) -> list[list[str]]:
    """Split rows deterministically by content (CRC-32 of the row), keeping input order."""
    parts: list[list[str]] = [[] for _ in range(parallelism)]
    for row in rows:
        parts[zlib.crc32(row.encode()) % parallelism].append(row)
    return parts


@dataclass
class _Txn:
    partition: int
    epoch: int
    instance: int
    rows: list[str] = field(default_factory=list)
    marker: Marker | None = None


@dataclass(frozen=True)
class Commit:
    """One commit applied to the store (data + marker, atomically)."""

    epoch: int
    partition: int
    rows: tuple[str, ...]


class MemoryStore:
    """The durable external system shared by every "process" of a test."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.commits: list[Commit] = []
        self.markers: dict[int, Marker] = {}
        self.instances: dict[int, int] = {}
        self.open_txns: dict[int, _Txn] = {}
        self.prepared: dict[str, _Txn] = {}
        self.fail_writes: set[tuple[int, int]] = set()  # (epoch, partition) whose write fails

    def fence(self, partition: int) -> int:
        """Open a new instance of ``partition``: abort its open transaction, return a token."""
        with self.lock:
            token = self.instances.get(partition, 0) + 1
            self.instances[partition] = token
            self.open_txns.pop(partition, None)
            return token

    def apply(self, txn: _Txn) -> None:
        """Make ``txn`` visible: its rows and its marker, atomically."""
        assert txn.marker is not None  # noqa: S101 - only pre-committed work is applied
        with self.lock:
            self.commits.append(Commit(txn.epoch, txn.partition, tuple(txn.rows)))
            self.markers[txn.partition] = txn.marker

    def rows_by_epoch(self) -> dict[int, list[str]]:
        """Every committed row, grouped by epoch (duplicates kept)."""
        out: dict[int, list[str]] = {}
        for commit in self.commits:
            out.setdefault(commit.epoch, []).extend(commit.rows)
        return out

    def dangling(self) -> list[str]:
        """Open or prepared transactions left in the store (none after a clean recovery)."""
        with self.lock:
            left = [f"open txn p{t.partition} epoch {t.epoch}" for t in self.open_txns.values()]
            return left + [f"prepared {gid}" for gid in self.prepared]


class _MemoryParticipant(Participant[MemRows]):
    def __init__(self, store: MemoryStore, plan: EpochPlan, partition: int) -> None:
        self.store = store
        self.plan = plan
        self.partition = partition
        self.token = store.fence(partition)

    def _check(self) -> None:
        if self.store.instances.get(self.partition) != self.token:
            msg = f"partition {self.partition}: fenced by a newer instance; stop this task"
            raise FencedError(msg)

    def committed_marker(self) -> Marker | None:
        with self.store.lock:
            self._check()
            return self.store.markers.get(self.partition)

    def summarize(self, rows: MemRows) -> RowSummary:
        return summarize_rows(rows)

    def begin(self, epoch: int) -> None:
        with self.store.lock:
            self._check()
            self.store.open_txns[self.partition] = _Txn(self.partition, epoch, self.token)

    def write(self, rows: MemRows) -> None:
        with self.store.lock:
            self._check()
            if (self.plan.epoch, self.partition) in self.store.fail_writes:
                msg = f"injected write failure on epoch {self.plan.epoch} p{self.partition}"
                raise ParticipantError(msg)
            self.store.open_txns[self.partition].rows.extend(rows)

    def _own_txn(self) -> _Txn | None:
        txn = self.store.open_txns.get(self.partition)
        return txn if txn is not None and txn.instance == self.token else None


class _CommitInTaskParticipant(_MemoryParticipant):
    def pre_commit(self, summary: RowSummary) -> None:
        with self.store.lock:
            self._check()
            self.store.open_txns[self.partition].marker = Marker(
                self.plan.epoch, summary.rows, summary.checksum
            )

    def commit(self) -> None:
        with self.store.lock:
            self._check()
            txn = self.store.open_txns.pop(self.partition)
            self.store.apply(txn)

    def abort(self) -> None:
        with self.store.lock:
            if self._own_txn() is not None:
                del self.store.open_txns[self.partition]


class CommitInTaskResource(Resource[MemRows]):
    """Kafka-like resource: the task commits; recovery redoes by marker."""

    completable_by_coordinator = False

    def __init__(self, store: MemoryStore, fingerprint: str = "v1") -> None:
        self.store = store
        self._fingerprint = fingerprint

    def open(self, plan: EpochPlan, partition: int) -> Participant[MemRows]:
        """Open partition ``partition``, fencing older instances."""
        return _CommitInTaskParticipant(self.store, plan, partition)

    def fingerprint(self) -> str:
        """Return the configuration digest."""
        return self._fingerprint

    def abort_lingering(self, partitions: Iterable[int]) -> None:
        """Fence every partition listed (aborts open transactions)."""
        for partition in partitions:
            self.store.fence(partition)


def gid(plan: EpochPlan, partition: int) -> str:
    """Global id of a prepared transaction (like PostgreSQL's PREPARE TRANSACTION id)."""
    return f"{plan.sink_id}:{plan.epoch}:{partition}:{plan.attempt}"


class _PreparedParticipant(_MemoryParticipant):
    def pre_commit(self, summary: RowSummary) -> None:
        with self.store.lock:
            self._check()
            txn = self.store.open_txns.pop(self.partition)
            txn.marker = Marker(self.plan.epoch, summary.rows, summary.checksum)
            self.store.prepared[gid(self.plan, self.partition)] = txn

    def commit(self) -> None:
        with self.store.lock:
            txn = self.store.prepared.pop(gid(self.plan, self.partition))
            self.store.apply(txn)

    def abort(self) -> None:
        with self.store.lock:
            if self._own_txn() is not None:
                del self.store.open_txns[self.partition]
            self.store.prepared.pop(gid(self.plan, self.partition), None)


class PreparedResource(Resource[MemRows]):
    """PostgreSQL-like resource: prepared transactions the coordinator finishes by id."""

    completable_by_coordinator = True

    def __init__(self, store: MemoryStore, fingerprint: str = "v1") -> None:
        self.store = store
        self._fingerprint = fingerprint

    def open(self, plan: EpochPlan, partition: int) -> Participant[MemRows]:
        """Open partition ``partition`` (a new session; an older session's work is dropped)."""
        return _PreparedParticipant(self.store, plan, partition)

    def fingerprint(self) -> str:
        """Return the configuration digest."""
        return self._fingerprint

    def commit_prepared(self, plan: EpochPlan, partition: int) -> None:
        """COMMIT PREPARED; a no-op if already committed or never prepared."""
        with self.store.lock:
            txn = self.store.prepared.pop(gid(plan, partition), None)
            if txn is not None:
                self.store.apply(txn)

    def rollback_prepared(self, plan: EpochPlan, partition: int) -> None:
        """ROLLBACK PREPARED; a no-op if absent."""
        with self.store.lock:
            self.store.prepared.pop(gid(plan, partition), None)

    def prepared_partitions(self, plan: EpochPlan) -> Sequence[int]:
        """Partitions of ``plan`` with a prepared transaction."""
        with self.store.lock:
            return [p for p in range(plan.parallelism) if gid(plan, p) in self.store.prepared]

    def abort_lingering(self, partitions: Iterable[int]) -> None:
        """Roll back every prepared and open transaction of the listed partitions."""
        wanted = set(partitions)
        with self.store.lock:
            for key in [k for k, t in self.store.prepared.items() if t.partition in wanted]:
                del self.store.prepared[key]
            for partition in wanted:
                self.store.fence(partition)
