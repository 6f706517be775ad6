"""The SQLite participant (one write partition of one epoch) and the resource that opens it."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

from connectors.examples.sqlite._config import SqliteSinkConfig
from connectors.examples.sqlite._database import MARKER_TABLE, connect, quote, read_marker
from connectors.examples.sqlite._errors import SqliteCode, SqliteSinkError, to_sink_error
from connectors.stage import ArrowPartition
from txn import EpochPlan, Marker, Participant, Resource, RowSummary


# --8<-- [start:participant]
class SqlitePartition(Participant[ArrowPartition]):
    """Write partition ``partition`` of one epoch: rows and marker in one local transaction.

    Fencing: ``begin`` takes the database's write lock (``BEGIN IMMEDIATE``) and reads the
    marker again under it, so of two live instances of the partition (a Spark task retry
    while the old attempt runs) the second to get the lock sees the first one's commit and
    stops (:class:`SqliteCode.PARTITION_CONFLICT`). A dead writer's transaction is rolled back by
    SQLite (its journal) before anyone else writes, so there is nothing to fence on ``open``.
    """

    def __init__(
        self, cfg: SqliteSinkConfig, columns: tuple[str, ...], plan: EpochPlan, partition: int
    ) -> None:
        self._cfg, self._plan, self._partition = cfg, plan, partition
        self._columns = columns
        names = ", ".join(quote(c) for c in columns)
        marks = ", ".join("?" for _ in columns)
        self._insert = f"INSERT INTO {quote(cfg.table)} ({names}) VALUES ({marks})"  # noqa: S608
        self._in_txn = False
        with self._errors("opening"):
            self._conn = connect(cfg)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            where = (
                f"{what} epoch {self._plan.epoch} partition {self._partition} of sink "
                f"{self._cfg.sink_id!r}"
            )
            raise to_sink_error(exc, where) from exc

    def committed_marker(self) -> Marker | None:
        """Return the last epoch this partition committed (None without exactly-once)."""
        if not self._cfg.transactional:
            return None
        with self._errors("reading the marker of"):
            return read_marker(self._conn, self._cfg.sink_id, self._partition)

    def summarize(self, rows: ArrowPartition) -> RowSummary:
        """Count and checksum the rows without writing (a replay compared with the marker)."""
        return rows.summary()

    def begin(self, epoch: int) -> None:
        """Take the write lock and check, under it, that no other instance committed ``epoch``."""
        with self._errors("beginning"):
            self._conn.execute("BEGIN IMMEDIATE")
            self._in_txn = True
            marker = self.committed_marker()
        if marker is not None and marker.epoch >= epoch:
            msg = (
                f"partition {self._partition} of sink {self._cfg.sink_id!r}: another instance "
                f"committed epoch {marker.epoch} while this one waited to write epoch {epoch}"
            )
            raise SqliteSinkError(msg, code=SqliteCode.PARTITION_CONFLICT)

    def write(self, rows: ArrowPartition) -> RowSummary:
        """Insert the rows inside the transaction; return their count and checksum."""
        with self._errors("writing"):
            for batch in rows.batches():
                values = [batch.column(name).to_pylist() for name in self._columns]
                self._conn.executemany(self._insert, zip(*values, strict=True))
        return rows.summary()

    def pre_commit(self, summary: RowSummary) -> None:
        """Write this epoch's marker row, drop the partition's older ones (in the transaction)."""
        if not self._cfg.transactional:
            return
        sink, part, epoch = self._cfg.sink_id, self._partition, self._plan.epoch
        with self._errors("recording the marker of"):
            self._conn.execute(
                f"INSERT INTO {MARKER_TABLE} VALUES (?, ?, ?, ?, ?)",  # noqa: S608
                (sink, part, epoch, summary.rows, summary.checksum),
            )
            self._conn.execute(
                f"DELETE FROM {MARKER_TABLE} WHERE sink_id = ? "  # noqa: S608
                "AND write_partition = ? AND epoch < ?",
                (sink, part, epoch),
            )

    def commit(self) -> None:
        """Commit rows and marker together (durable when this returns)."""
        with self._errors("committing"):
            self._conn.execute("COMMIT")
        self._in_txn = False

    def abort(self) -> None:
        """Roll back the open transaction, if any. Idempotent; never raises."""
        if self._in_txn:
            self._in_txn = False
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")

    def close(self) -> None:
        """Roll back anything still open and close the connection."""
        self.abort()
        self._conn.close()


# --8<-- [end:participant]


# --8<-- [start:resource]
@dataclass(frozen=True)
class SqliteResource(Resource[ArrowPartition]):
    """The driver's description of the sink, pickled to every write task.

    Commit-in-task (``completable_by_coordinator`` False): no prepared work to commit,
    roll back or list; a dead task's transaction is rolled back by SQLite itself, so
    ``abort_lingering`` has nothing to do either.
    """

    cfg: SqliteSinkConfig
    columns: tuple[str, ...]

    def open(self, plan: EpochPlan, partition: int) -> SqlitePartition:
        """Open write partition ``partition`` of ``plan`` (inside the write task)."""
        return SqlitePartition(self.cfg, self.columns, plan, partition)

    def fingerprint(self) -> str:
        """Return the config's fingerprint."""
        return self.cfg.fingerprint()


# --8<-- [end:resource]
