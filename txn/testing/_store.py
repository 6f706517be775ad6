"""The external system of the protocol tests: a store of committed rows and markers.

A :class:`MemoryStore` plays Kafka or PostgreSQL: it survives a simulated crash, while
every in-process object (coordinator, participants, executor) is dropped. Participants
talk to it only through its methods, so the same participants work against a store
served to other processes (``_remote``), for example Spark's Python workers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from txn._errors import TxnCode, TxnError
from txn._model import Marker


@dataclass(kw_only=True)
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
    """The durable external system shared by every "process" of a test. Thread-safe.

    Transactions: one open transaction per partition, owned by the instance (token)
    that began it; :meth:`fence` opens a new instance and aborts the open one. Prepared
    transactions are held under a global id until committed or rolled back by anyone.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.commits: list[Commit] = []
        self.markers: dict[int, Marker] = {}
        self.instances: dict[int, int] = {}
        self.open_txns: dict[int, _Txn] = {}
        self.prepared: dict[str, _Txn] = {}
        self.fail_writes: set[tuple[int, int]] = set()  # (epoch, partition) whose write fails

    # -- instances -----------------------------------------------------------------------
    def fence(self, partition: int) -> int:
        """Open a new instance of ``partition``: abort its open transaction, return a token."""
        with self.lock:
            token = self.instances.get(partition, 0) + 1
            self.instances[partition] = token
            self.open_txns.pop(partition, None)
            return token

    def _check(self, partition: int, token: int) -> None:
        if self.instances.get(partition) != token:
            msg = f"partition {partition}: fenced by a newer instance; stop this task"
            raise TxnError(msg, code=TxnCode.PARTICIPANT)

    def marker(self, partition: int, token: int) -> Marker | None:
        """Return the partition's committed marker, read by instance ``token``."""
        with self.lock:
            self._check(partition, token)
            return self.markers.get(partition)

    # -- one transaction -------------------------------------------------------------------
    def begin(self, partition: int, epoch: int, token: int) -> None:
        """Begin instance ``token``'s transaction of ``epoch`` on ``partition``."""
        with self.lock:
            self._check(partition, token)
            self.open_txns[partition] = _Txn(partition=partition, epoch=epoch, instance=token)

    def write(self, partition: int, rows: list[str], token: int) -> None:
        """Add ``rows`` to the open transaction (fails if its (epoch, partition) is marked)."""
        with self.lock:
            self._check(partition, token)
            txn = self.open_txns[partition]
            if (txn.epoch, partition) in self.fail_writes:
                msg = f"injected write failure on epoch {txn.epoch} p{partition}"
                raise TxnError(msg, code=TxnCode.PARTICIPANT)
            txn.rows.extend(rows)

    def fail_write(self, epoch: int, partition: int) -> None:
        """Make the writes of ``(epoch, partition)`` fail until :meth:`heal_write`."""
        with self.lock:
            self.fail_writes.add((epoch, partition))

    def heal_write(self, epoch: int, partition: int) -> None:
        """Let the writes of ``(epoch, partition)`` succeed again."""
        with self.lock:
            self.fail_writes.discard((epoch, partition))

    def put_marker(self, partition: int, marker: Marker, token: int) -> None:
        """Put ``marker`` in the open transaction (commit-in-task pre-commit)."""
        with self.lock:
            self._check(partition, token)
            self.open_txns[partition].marker = marker

    def commit(self, partition: int, token: int) -> None:
        """Commit the open transaction: its rows and its marker become visible at once."""
        with self.lock:
            self._check(partition, token)
            self._apply(self.open_txns.pop(partition))

    def abort_own(self, partition: int, token: int) -> None:
        """Abort the open transaction if instance ``token`` owns it."""
        with self.lock:
            txn = self.open_txns.get(partition)
            if txn is not None and txn.instance == token:
                del self.open_txns[partition]

    # -- prepared transactions -------------------------------------------------------------
    def prepare(self, partition: int, gid: str, marker: Marker, token: int) -> None:
        """Move the open transaction, with ``marker``, to the prepared ones under ``gid``."""
        with self.lock:
            self._check(partition, token)
            txn = self.open_txns.pop(partition)
            txn.marker = marker
            self.prepared[gid] = txn

    def commit_prepared(self, gid: str) -> bool:
        """COMMIT PREPARED; False (and nothing done) if no transaction is prepared as ``gid``."""
        with self.lock:
            txn = self.prepared.pop(gid, None)
            if txn is not None:
                self._apply(txn)
            return txn is not None

    def peek_marker(self, partition: int) -> Marker | None:
        """Return the partition's committed marker without an instance (the coordinator's read)."""
        with self.lock:
            return self.markers.get(partition)

    def rollback_prepared(self, gid: str) -> None:
        """ROLLBACK PREPARED: a no-op if absent."""
        with self.lock:
            self.prepared.pop(gid, None)

    def prepared_gids(self) -> list[str]:
        """Global ids of every prepared transaction."""
        with self.lock:
            return list(self.prepared)

    def abort_partitions(self, partitions: list[int]) -> None:
        """Roll back every prepared and open transaction of ``partitions`` (fencing them)."""
        wanted = set(partitions)
        with self.lock:
            for key in [k for k, t in self.prepared.items() if t.partition in wanted]:
                del self.prepared[key]
            for partition in wanted:
                self.fence(partition)

    # -- reading ---------------------------------------------------------------------------
    def _apply(self, txn: _Txn) -> None:
        assert txn.marker is not None  # noqa: S101 - only pre-committed work is applied
        self.commits.append(Commit(txn.epoch, txn.partition, tuple(txn.rows)))
        self.markers[txn.partition] = txn.marker

    def rows_by_epoch(self) -> dict[int, list[str]]:
        """Every committed row, grouped by epoch (duplicates kept)."""
        with self.lock:
            out: dict[int, list[str]] = {}
            for commit in self.commits:
                out.setdefault(commit.epoch, []).extend(commit.rows)
            return out

    def dangling(self) -> list[str]:
        """Open or prepared transactions left in the store (none after a clean recovery)."""
        with self.lock:
            left = [f"open txn p{t.partition} epoch {t.epoch}" for t in self.open_txns.values()]
            return left + [f"prepared {gid}" for gid in self.prepared]
