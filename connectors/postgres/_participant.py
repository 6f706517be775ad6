"""PostgreSQL as a ``txn`` participant: one transaction per write partition.

Two commit protocols (chosen on the driver, see ``_resource``):

* two-phase (``completable_by_coordinator``): the task writes, records its marker and ends
  with ``PREPARE TRANSACTION`` under the gid of (sink, epoch, attempt, partition); the
  coordinator logs the decision and runs ``COMMIT PREPARED`` / ``ROLLBACK PREPARED``;
* idempotency table: the task writes, records its marker and commits its local
  transaction itself; a replay skips partitions whose marker covers the epoch.

Opening a partition (exactly-once) fences older instances of it, the way Kafka's
``init_transactions`` does: every live instance holds a session-level advisory lock of
(sink, partition); a new one terminates the sessions holding it (their open transaction
is rolled back by the server), takes the lock, and rolls back this partition's prepared
transactions (no decision can be pending for them while a task of the sink runs: the
coordinator finishes every decided epoch before it plans the next attempt). The marker
row lock (``_markers``) is the second line of defence. The call order is the one of
:class:`txn.Participant`, enforced by ``txn._task.run_partition``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import psycopg
import pyarrow as pa
from psycopg import sql

from connectors.postgres import _input_offsets, _markers, _twophase
from connectors.postgres._bad_records import write_dead_letters, write_isolating
from connectors.postgres._classify import to_sink_error
from connectors.postgres._config import PostgresSinkConfig, WriteMode
from connectors.postgres._connect import Conn, connect
from connectors.postgres._control import advisory_key, load_table_name, qualified
from connectors.postgres._errors import PostgresSinkError
from connectors.postgres._schema import TableLayout
from connectors.postgres._twophase import Gid
from connectors.postgres._writer import BulkWriter, ensure_load_table
from connectors.stage import ArrowPartition, DeadLetterContext
from connectors.stage._states import ParticipantState, ParticipantStateMachine
from txn import EpochPlan, Marker, Participant, RowSummary

# Milliseconds pg_terminate_backend waits for a fenced session to be gone.
TERMINATE_WAIT_MS = 10_000


def partition_lock_key(sink_id: str, partition: int) -> int:
    """Return the advisory lock key held by the live instance of (sink, partition)."""
    return advisory_key("partition", sink_id, partition)


def terminate_holders(conn: Conn, key: int) -> int:
    """Terminate every other session holding advisory lock ``key``; return how many."""
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    rows = conn.execute(
        "SELECT pg_terminate_backend(l.pid, %s) FROM pg_locks l "
        "JOIN pg_database d ON d.oid = l.database AND d.datname = current_database() "
        "WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = %s "
        "AND l.objsubid = 1 AND l.pid <> pg_backend_pid()",
        (TERMINATE_WAIT_MS, unsigned >> 32, unsigned & 0xFFFFFFFF),
    ).fetchall()
    return len(rows)


_S = ParticipantState
_MOVES = {
    _S.OPENED: frozenset({_S.READY, _S.DONE}),
    _S.READY: frozenset({_S.IN_TXN, _S.DONE}),
    _S.IN_TXN: frozenset({_S.WRITTEN, _S.DONE}),
    _S.WRITTEN: frozenset({_S.PRE_COMMITTED, _S.PREPARED, _S.DONE}),
    _S.PRE_COMMITTED: frozenset({_S.DONE}),  # idempotency table: marker written
    _S.PREPARED: frozenset({_S.DONE}),  # two-phase: PREPARE TRANSACTION done
    _S.DONE: frozenset(),
    _S.FAILED_IN_TXN: frozenset({_S.DONE}),  # a call failed inside the transaction
    _S.FAILED: frozenset({_S.DONE}),  # reading the marker failed
}
_ROLLBACK = frozenset({_S.IN_TXN, _S.WRITTEN, _S.PRE_COMMITTED, _S.FAILED_IN_TXN})


class PostgresParticipant(Participant[ArrowPartition]):
    """Write partition ``partition`` of one epoch (see the module docstring)."""

    def __init__(
        self,
        cfg: PostgresSinkConfig,
        layout: TableLayout,
        two_phase: bool,
        plan: EpochPlan,
        partition: int,
    ) -> None:
        self._cfg = cfg
        self._layout = layout
        self._two_phase = two_phase and cfg.transactional
        self._plan = plan
        self._partition = partition
        self._gid = Gid(
            sink_id=cfg.sink_id, epoch=plan.epoch, attempt=plan.attempt, partition=partition
        )
        self._load_table: sql.Composed | None = None
        self._rejected: list[pa.RecordBatch] = []
        self._states = ParticipantStateMachine(
            _MOVES, f"partition {partition}", error=PostgresSinkError
        )
        self._conn = connect(cfg, f"p{partition}", autocommit=True)
        try:
            with self._errors("opening"):
                self._open()
        except BaseException:
            self._conn.close()
            raise

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Turn psycopg errors into the sink's typed errors, naming the operation."""
        try:
            yield
        except psycopg.Error as exc:
            where = f"{what} epoch {self._plan.epoch} partition {self._partition} of sink {self._cfg.sink_id!r}"
            raise to_sink_error(exc, where) from exc

    def _open(self) -> None:
        cfg, conn = self._cfg, self._conn
        if cfg.transactional:
            key = partition_lock_key(cfg.sink_id, self._partition)
            terminate_holders(conn, key)
            conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            for gid in _twophase.list_prepared(conn, cfg.sink_id):
                if gid.partition == self._partition:
                    _twophase.rollback_prepared(conn, gid)
            _markers.ensure_marker_row(conn, cfg.control_schema, cfg.sink_id, self._partition)
        if self._layout.write_mode is not WriteMode.APPEND:
            name = load_table_name(cfg.sink_id, self._partition, self._layout.digest())
            ensure_load_table(conn, self._layout, cfg.control_schema, name)
            self._load_table = qualified(cfg.control_schema, name)

    def committed_marker(self) -> Marker | None:
        """Return the partition's committed marker (None without exactly-once)."""
        marker = None
        with self._states.step(_S.READY, _S.FAILED), self._errors("reading the marker of"):
            if self._cfg.transactional:
                marker = _markers.read_marker(
                    self._conn, self._cfg.control_schema, self._cfg.sink_id, self._partition
                )
        return marker

    def summarize(self, rows: ArrowPartition) -> RowSummary:
        """Read the rows without writing (a replay compared with the marker)."""
        return rows.summary()

    @contextlib.contextmanager
    def _step(self, to: ParticipantState, what: str) -> Iterator[None]:
        """One step inside the transaction: a failure leaves it to roll back."""
        with self._states.step(to, _S.FAILED_IN_TXN), self._errors(what):
            yield

    def begin(self, epoch: int) -> None:
        """Open the local transaction and lock the marker row (exactly-once)."""
        self._states.check(_S.IN_TXN)
        self._conn.autocommit = False
        with self._step(_S.IN_TXN, "locking the marker of"):
            if self._cfg.transactional:
                _markers.lock_marker(
                    self._conn,
                    self._cfg.control_schema,
                    self._cfg.sink_id,
                    self._partition,
                    epoch,
                )

    def write(self, rows: ArrowPartition) -> RowSummary:
        """Bulk-write the rows in the open transaction; return their summary.

        With ``on_bad_record`` other than fail, rows the server rejects (SQLSTATE classes
        22, 23) are isolated under savepoints and kept for :meth:`rejected_records`.
        """
        with self._step(_S.WRITTEN, "writing"):
            writer = BulkWriter(self._conn, self._layout, self._load_table)
            if self._cfg.screens_records:
                where = f"writing epoch {self._plan.epoch} partition {self._partition}"
                self._rejected = write_isolating(self._conn, writer, rows.batches(), where)
            else:
                writer.write(rows.batches())
        return rows.summary()

    def rejected_records(self) -> list[pa.RecordBatch]:
        """Return the rows the server rejected in :meth:`write` (with their errors)."""
        return self._rejected

    def write_dead_letters(
        self, records: Sequence[pa.RecordBatch], context: DeadLetterContext
    ) -> None:
        """Copy bad records into the dead-letter table, in the epoch's open transaction."""
        table = self._cfg.dead_letter_table
        assert table is not None  # noqa: S101 - the config sets it with dead-letter
        with self._errors("dead-lettering"):
            write_dead_letters(self._conn, self._cfg.control_schema, table, records, context)

    def pre_commit(self, summary: RowSummary) -> None:
        """Record the marker; two-phase: PREPARE TRANSACTION (durable, invisible)."""
        cfg = self._cfg
        with self._step(_S.PREPARED if self._two_phase else _S.PRE_COMMITTED, "pre-committing"):
            if cfg.transactional:
                marker = Marker(self._plan.epoch, summary.rows, summary.checksum)
                _markers.write_marker(
                    self._conn,
                    cfg.control_schema,
                    cfg.sink_id,
                    self._partition,
                    marker,
                    self._plan.attempt,
                )
                if self._partition == _input_offsets.OFFSETS_PARTITION:  # with the rows
                    _input_offsets.write_input_offsets(
                        self._conn, cfg.control_schema, cfg.sink_id, self._plan
                    )
            if self._two_phase:
                _twophase.prepare(self._conn, self._gid)

    def commit(self) -> None:
        """Commit: the local transaction, or (two-phase) COMMIT PREPARED of our gid."""
        prepared = self._states.state is _S.PREPARED
        with self._step(_S.DONE, "committing"):
            if prepared:
                self._conn.autocommit = True
                _twophase.commit_prepared(self._conn, self._gid)
            else:
                self._conn.commit()

    def abort(self) -> None:
        """Roll back the open or prepared transaction. Idempotent; never raises.

        A broken session's open transaction died with it. A prepared transaction this
        call cannot roll back (the session is gone) is rolled back by the coordinator
        (its abort decision) or by ``abort_lingering`` / the next ``open`` of the partition.
        """
        state = self._states.state
        if state is _S.DONE:
            return
        self._states.move(_S.DONE)
        with contextlib.suppress(psycopg.Error):
            if state in _ROLLBACK:
                self._conn.rollback()
            elif state is _S.PREPARED:
                self._conn.autocommit = True
                _twophase.rollback_prepared(self._conn, self._gid)

    def close(self) -> None:
        """Roll back an open transaction, release the partition lock, close the session.

        Released explicitly (when the session still works): a closed session's backend
        exits asynchronously, and the next task of the partition should not have to fence it.
        """
        with contextlib.suppress(psycopg.Error):
            if not self._conn.closed and not self._conn.broken:
                self._conn.rollback()
                self._conn.autocommit = True
                self._conn.execute("SELECT pg_advisory_unlock_all()")
        self._conn.close()
