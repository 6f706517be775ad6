"""In-memory participants of both kinds, over a :class:`~txn.testing.MemoryStore`.

* :class:`CommitInTaskResource` (like Kafka): the task commits its own transaction; the
  marker is applied atomically with the data; opening a partition fences the previous
  instance and aborts its open transaction; nobody else can finish a transaction.
* :class:`PreparedResource` (like PostgreSQL): ``pre_commit`` prepares the transaction
  under a global id; the coordinator commits or rolls it back by id from "another process".

Rows are a sequence of strings, :class:`OnePassRows` (readable once, like a Spark
partition), or anything a ``decode`` function turns into strings (e.g. Arrow batches
in a Spark write task). These are test doubles of the external systems, not connectors.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from txn._errors import TxnCode, TxnError
from txn._model import EpochPlan, Marker, Participant, Resource, RowSummary


class OnePassRows:
    """The rows of one write task, readable once, like a Spark partition's iterator.

    The participant contract never needs rows twice; reading them a second time raises,
    so a protocol change that would need a second pass fails the tests at once.
    """

    def __init__(self, rows: Iterable[str]) -> None:
        self._rows = tuple(rows)
        self._read = False

    def read(self) -> tuple[str, ...]:
        """Return the rows; raise :class:`TxnCode.PARTICIPANT` on a second call."""
        if self._read:
            msg = "the rows of a write task were read twice; the contract allows one pass"
            raise TxnError(msg, code=TxnCode.PARTICIPANT)
        self._read = True
        return self._rows


MemRows = Any
Decode = Callable[[Any], Sequence[str]]


def read_rows(rows: MemRows) -> Sequence[str]:
    """Return the rows as strings: the default ``decode`` (strings, or :class:`OnePassRows`)."""
    if isinstance(rows, OnePassRows):
        return rows.read()
    return list(rows)


def summarize_rows(rows: Sequence[str]) -> RowSummary:
    """Row count and SHA-256 of the rows (order-sensitive)."""
    digest = hashlib.sha256(json.dumps(list(rows)).encode()).hexdigest()[:16]
    return RowSummary(len(rows), digest)


def partition_rows(rows: Sequence[str], parallelism: int) -> list[list[str]]:
    """Split rows deterministically by content (CRC-32 of the row), keeping input order."""
    parts: list[list[str]] = [[] for _ in range(parallelism)]
    for row in rows:
        parts[zlib.crc32(row.encode()) % parallelism].append(row)
    return parts


def gid(plan: EpochPlan, partition: int) -> str:
    """Global id of a prepared transaction (like PostgreSQL's PREPARE TRANSACTION id)."""
    return f"{plan.sink_id}:{plan.epoch}:{partition}:{plan.attempt}"


class Store(Protocol):
    """What the participants use of a store (a MemoryStore, or a handle on a served one)."""

    def fence(self, partition: int) -> int: ...
    def marker(self, partition: int, token: int) -> Marker | None: ...
    def begin(self, partition: int, epoch: int, token: int) -> None: ...
    def write(self, partition: int, rows: list[str], token: int) -> None: ...
    def put_marker(self, partition: int, marker: Marker, token: int) -> None: ...
    def commit(self, partition: int, token: int) -> None: ...
    def abort_own(self, partition: int, token: int) -> None: ...
    def prepare(self, partition: int, gid: str, marker: Marker, token: int) -> None: ...
    def commit_prepared(self, gid: str) -> bool: ...
    def peek_marker(self, partition: int) -> Marker | None: ...
    def rollback_prepared(self, gid: str) -> None: ...
    def prepared_gids(self) -> list[str]: ...
    def abort_partitions(self, partitions: list[int]) -> None: ...


class _MemoryParticipant(Participant[MemRows]):
    def __init__(self, store: Store, plan: EpochPlan, partition: int, decode: Decode) -> None:
        self.store = store
        self.plan = plan
        self.partition = partition
        self.decode = decode
        self.token = store.fence(partition)

    def committed_marker(self) -> Marker | None:
        return self.store.marker(self.partition, self.token)

    def summarize(self, rows: MemRows) -> RowSummary:
        return summarize_rows(self.decode(rows))

    def begin(self, epoch: int) -> None:
        self.store.begin(self.partition, epoch, self.token)

    def write(self, rows: MemRows) -> RowSummary:
        data = list(self.decode(rows))
        self.store.write(self.partition, data, self.token)
        return summarize_rows(data)

    def _marker(self, summary: RowSummary) -> Marker:
        return Marker(self.plan.epoch, summary.rows, summary.checksum)


class _CommitInTaskParticipant(_MemoryParticipant):
    def pre_commit(self, summary: RowSummary) -> None:
        self.store.put_marker(self.partition, self._marker(summary), self.token)

    def commit(self) -> None:
        self.store.commit(self.partition, self.token)

    def abort(self) -> None:
        self.store.abort_own(self.partition, self.token)


class _MemoryResource(Resource[MemRows]):
    reads_markers = True

    def __init__(self, store: Store, fingerprint: str = "v1", decode: Decode = read_rows) -> None:
        self.store = store
        self._fingerprint = fingerprint
        self._decode = decode

    def fingerprint(self) -> str:
        """Return the configuration digest."""
        return self._fingerprint

    def committed_markers(self, plan: EpochPlan) -> Mapping[int, Marker | None]:
        """Every partition's committed marker (read without fencing)."""
        return {p: self.store.peek_marker(p) for p in range(plan.parallelism)}


class CommitInTaskResource(_MemoryResource):
    """Kafka-like resource: the task commits; recovery redoes by marker."""

    completable_by_coordinator = False

    def open(self, plan: EpochPlan, partition: int) -> Participant[MemRows]:
        """Open partition ``partition``, fencing older instances."""
        return _CommitInTaskParticipant(self.store, plan, partition, self._decode)

    def abort_lingering(self, partitions: Iterable[int]) -> None:
        """Fence every partition listed (aborts open transactions)."""
        for partition in partitions:
            self.store.fence(partition)


class _PreparedParticipant(_MemoryParticipant):
    def pre_commit(self, summary: RowSummary) -> None:
        self.store.prepare(
            self.partition, gid(self.plan, self.partition), self._marker(summary), self.token
        )

    def commit(self) -> None:
        self.store.commit_prepared(gid(self.plan, self.partition))

    def abort(self) -> None:
        self.store.abort_own(self.partition, self.token)
        self.store.rollback_prepared(gid(self.plan, self.partition))


class PreparedResource(_MemoryResource):
    """PostgreSQL-like resource: prepared transactions the coordinator finishes by id."""

    completable_by_coordinator = True

    def open(self, plan: EpochPlan, partition: int) -> Participant[MemRows]:
        """Open partition ``partition`` (a new session; an older session's work is dropped)."""
        return _PreparedParticipant(self.store, plan, partition, self._decode)

    def commit_prepared(self, plan: EpochPlan, partition: int) -> None:
        """COMMIT PREPARED; a no-op if the partition's marker covers the epoch already.

        Raises:
            TxnCode.PREPARED_WORK_LOST: neither the prepared work nor a marker of the epoch
                exists (like PostgreSQL after a ROLLBACK PREPARED by hand).

        """
        if self.store.commit_prepared(gid(plan, partition)):
            return
        marker = self.store.peek_marker(partition)
        if marker is None or marker.epoch < plan.epoch:
            msg = (
                f"epoch {plan.epoch} partition {partition}: neither prepared work "
                f"{gid(plan, partition)} nor a marker of the epoch (marker: {marker})"
            )
            raise TxnError(msg, partition=partition, code=TxnCode.PREPARED_WORK_LOST)

    def rollback_prepared(self, plan: EpochPlan, partition: int) -> None:
        """ROLLBACK PREPARED; a no-op if absent."""
        self.store.rollback_prepared(gid(plan, partition))

    def prepared_partitions(self, plan: EpochPlan) -> Sequence[int]:
        """Partitions of ``plan`` with a prepared transaction."""
        held = set(self.store.prepared_gids())
        return [p for p in range(plan.parallelism) if gid(plan, p) in held]

    def abort_lingering(self, partitions: Iterable[int]) -> None:
        """Roll back every prepared and open transaction of the listed partitions."""
        self.store.abort_partitions(list(partitions))
