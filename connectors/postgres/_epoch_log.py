"""``PostgresEpochLog``: the sink's epoch log in two tables of the control schema.

Layout (shared by every sink of the database, keyed by sink id):

* ``epoch_log (sink_id, seq, record)``: one :func:`txn._codec.encode_record` line per record
  (checksummed), ``seq`` contiguous from the header's ``first_seq`` to ``next_seq - 1``;
* ``epoch_log_head (sink_id, header)``: one sealed JSON header per sink:
  ``generation`` (the owner token), ``first_seq``, ``next_seq``, and the facts kept by
  compaction (``committed_through``, ``parallelism_floor``), like ``FileEpochLog``'s header.

Protocol:

1. opening takes a session-level advisory lock of the sink (``pg_try_advisory_lock``): a
   second coordinator is refused at once (:class:`TxnCode.EPOCH_LOG_LOCKED`, a kind of
   ``txn.TxnCode.EPOCH_LOG_LOCKED``, naming the holder's backend); then, in one transaction,
   it reads and verifies the log and bumps ``generation``;
2. each ``append`` is one transaction (``synchronous_commit = on``): lock the header row,
   check that ``generation`` is still ours (else another coordinator took over after our
   session was lost: fenced), read and verify every record, fold and validate the new one
   (:meth:`txn.EpochHistory.with_record`, then compaction), make the table hold exactly
   the folded records (delete those folding dropped: compacted epochs, a replaced query
   binding; renumber the kept ones so ``seq`` stays contiguous; insert the new one),
   rewrite the header; it returns once PostgreSQL has committed (durable);
3. a lost connection is reopened (retried), the advisory lock re-taken (if another
   coordinator holds it: fenced), and an append whose commit outcome was unknown is
   recognised (the log's last record is the same record) instead of written twice;
4. anything that does not verify (a header or record checksum, a missing or extra
   ``seq``, a record of another sink) raises ``txn.TxnCode.EPOCH_LOG_CORRUPT`` naming the table,
   the sink and the ``seq``: the log holds commit decisions and is never "repaired".

``read_only=True`` (operators and checkers, like ``FileEpochLog``'s): no lock, no new
generation, no DDL; each :meth:`~PostgresEpochLog.load` reads one committed state (one
transaction), a database without the control tables reads as an empty log, and
:meth:`~PostgresEpochLog.append` raises.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from connectors.postgres._classify import call_with_retry
from connectors.postgres._config import PostgresSinkConfig
from connectors.postgres._connect import Conn, connect
from connectors.postgres._control import (
    LOG_HEAD_TABLE,
    LOG_TABLE,
    advisory_key,
    ensure_control_tables,
    qualified,
)
from connectors.postgres._errors import WRITE_CODES, PostgresSinkError
from txn import EpochHistory, EpochLog, LogRecord, QueryBinding, TxnCode, TxnError
from txn._codec import FORMAT_VERSION, corrupt_error, encode_record, record_from_body, seal, unseal
from txn._log import DEFAULT_RETAIN_EPOCHS

_HEADER_INTS = ("generation", "first_seq", "next_seq", "parallelism_floor")
T = TypeVar("T")
Rows = list[tuple[int, LogRecord]]  # (seq, record) of the table, in seq order


class PostgresEpochLog(EpochLog):
    """Epoch log of ``cfg.sink_id`` in ``cfg.control_schema`` (see the module docstring)."""

    def __init__(
        self,
        cfg: PostgresSinkConfig,
        *,
        retain_epochs: int = DEFAULT_RETAIN_EPOCHS,
        read_only: bool = False,
    ) -> None:
        if (
            isinstance(retain_epochs, bool)
            or not isinstance(retain_epochs, int)
            or retain_epochs < 0
        ):
            msg = f"retain_epochs must be an int >= 0, got {retain_epochs!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        self._cfg = cfg
        self._retain = retain_epochs
        self._log = qualified(cfg.control_schema, LOG_TABLE)
        self._head = qualified(cfg.control_schema, LOG_HEAD_TABLE)
        self._where = f"{cfg.control_schema}.{LOG_TABLE} of sink {cfg.sink_id!r}"
        self._lock_key = advisory_key("epoch-log", cfg.sink_id)
        self._conn: Conn | None = None
        self._closed = False
        self._generation = 0
        self._read_only = read_only
        if read_only:
            return
        try:
            conn = self._connection()
            ensure_control_tables(conn, cfg.control_schema)
            self._generation = self._io("open", self._take_over)
        except BaseException:
            self.close()
            raise

    @property
    def sink_id(self) -> str:
        """The sink this log belongs to."""
        return self._cfg.sink_id

    @property
    def generation(self) -> int:
        """How many times the log was opened, this open included (the owner token)."""
        return self._generation

    def _io(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` with retries; a server error becomes ``txn.TxnCode.EPOCH_LOG``.

        A fenced coordinator releases the log at once (it must never write again).
        """
        try:
            return call_with_retry(f"{what} {self._where}", fn)
        except PostgresSinkError as exc:
            if exc.code is TxnCode.EPOCH_LOG_LOCKED:
                self.close()
                raise
            if exc.code not in WRITE_CODES:
                raise
            msg = f"cannot {what} epoch log {self._where}: {exc} (the last durable state is intact)"
            raise TxnError(msg, code=TxnCode.EPOCH_LOG) from exc

    # -- connection and lock -------------------------------------------------------------
    def _connection(self) -> Conn:
        if self._closed:
            msg = f"epoch log {self._where} is closed; open a new PostgresEpochLog"
            raise TxnError(msg, code=TxnCode.EPOCH_LOG)
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        conn = connect(self._cfg, "coordinator", autocommit=True)
        if self._read_only:
            self._conn = conn
            return conn
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (self._lock_key,)).fetchone()
        if row is None or not row[0]:
            holder = self._holder(conn)
            conn.close()
            msg = (
                f"epoch log {self._where} is held by another coordinator ({holder}); only one "
                f"driver may run sink {self._cfg.sink_id!r} at a time: stop the other query first"
            )
            raise PostgresSinkError(msg, code=TxnCode.EPOCH_LOG_LOCKED)
        self._conn = conn
        return conn

    def _holder(self, conn: Conn) -> str:
        key = self._lock_key & 0xFFFFFFFFFFFFFFFF
        row = conn.execute(
            "SELECT a.pid, a.application_name, a.client_addr::text FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
            "AND l.classid = %s AND l.objid = %s AND l.objsubid = 1 AND l.granted LIMIT 1",
            (key >> 32, key & 0xFFFFFFFF),
        ).fetchone()
        if row is None:
            return "holder unknown"
        return f"backend pid {row[0]}, application {row[1]!r}, client {row[2] or 'local'}"

    # -- reading -------------------------------------------------------------------------
    def _read(self, conn: Conn, *, lock: bool) -> tuple[EpochHistory, dict[str, Any], Rows]:
        """Read and verify the header and records; return (history, header, rows).

        ``rows`` are the table's ``(seq, record)`` pairs, the record objects the history holds.
        """
        query = sql.SQL("SELECT header FROM {} WHERE sink_id = %s").format(self._head)
        if lock:
            query = sql.SQL("{} FOR UPDATE").format(query)
        row = conn.execute(query, (self.sink_id,)).fetchone()
        stored = conn.execute(
            sql.SQL("SELECT seq, record FROM {} WHERE sink_id = %s ORDER BY seq").format(self._log),
            (self.sink_id,),
        ).fetchall()
        if row is None:
            if stored:
                raise corrupt_error(self._where, "records exist but the header row is missing")
            return EpochHistory(self.sink_id), {}, []
        header = self._check_header(unseal(row[0].encode(), source=f"{self._where} header"))
        rows: Rows = []
        for seq, text in stored:
            source = f"{self._where} seq {seq}"
            rows.append(
                (int(seq), record_from_body(unseal(text.encode(), source=source), source=source))
            )
        self._check_seqs(header, rows)
        history = EpochHistory.from_records(
            [r for _, r in rows],
            sink_id=self.sink_id,
            committed_through=header["committed_through"],
            parallelism_floor=header["parallelism_floor"],
        )
        return history, header, rows

    def _check_seqs(self, header: dict[str, Any], rows: Rows) -> None:
        """Check that the records are ``first_seq .. next_seq - 1`` without a gap.

        One gap is accepted: the layout an earlier release left when compaction dropped
        the epochs right after a query binding (the binding kept its seq): the binding
        first, then every record from the first epoch above ``committed_through`` on. The
        next append renumbers it.
        """
        seqs = [seq for seq, _ in rows]
        if seqs == list(range(header["first_seq"], header["next_seq"])):
            return
        through = header["committed_through"]
        earlier_release = (
            len(rows) > 1
            and through is not None
            and seqs[0] == header["first_seq"]
            and isinstance(rows[0][1], QueryBinding)
            and seqs[1:] == list(range(seqs[1], header["next_seq"]))
            and not isinstance(rows[1][1], QueryBinding)
            and rows[1][1].epoch == through + 1
        )
        if not earlier_release:
            raise corrupt_error(
                self._where,
                f"records have seq {seqs}, the header says {header['first_seq']}.."
                f"{header['next_seq'] - 1} (a record was removed or added outside the sink)",
            )

    def _check_header(self, header: dict[str, Any]) -> dict[str, Any]:
        where = f"{self._where} header"
        through = header.get("committed_through")
        if (
            header.get("type") != "header"
            or header.get("format") != FORMAT_VERSION
            or header.get("sink_id") != self.sink_id
            or not all(type(header.get(k)) is int for k in _HEADER_INTS)
            or not (through is None or type(through) is int)
        ):
            raise corrupt_error(where, f"bad header {header}")
        return header

    def _write_header(self, conn: Conn, header: dict[str, Any], *, insert: bool) -> None:
        text = seal(header).decode()
        if insert:
            conn.execute(
                sql.SQL("INSERT INTO {} (sink_id, header) VALUES (%s, %s)").format(self._head),
                (self.sink_id, text),
            )
        else:
            conn.execute(
                sql.SQL("UPDATE {} SET header = %s WHERE sink_id = %s").format(self._head),
                (text, self.sink_id),
            )

    def _take_over(self) -> int:
        conn = self._connection()
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = on")
            history, header, _ = self._read(conn, lock=True)
            fresh = not header
            header = header or {
                "type": "header",
                "format": FORMAT_VERSION,
                "sink_id": self.sink_id,
                "generation": 0,
                "first_seq": 0,
                "next_seq": 0,
                "committed_through": history.committed_through,
                "parallelism_floor": history.parallelism_floor,
            }
            header["generation"] += 1
            self._write_header(conn, header, insert=fresh)
        return int(header["generation"])

    def _check_generation(self, header: dict[str, Any]) -> None:
        if header.get("generation") != self._generation:
            msg = (
                f"epoch log {self._where} was taken over by another coordinator (generation "
                f"{header.get('generation')}, ours {self._generation}); this coordinator is "
                "fenced: stop it"
            )
            raise PostgresSinkError(msg, code=TxnCode.EPOCH_LOG_LOCKED)

    def load(self) -> EpochHistory:
        """Read, verify and fold the log (fenced if another coordinator took it over)."""

        def read() -> EpochHistory:
            conn = self._connection()
            with conn.transaction():
                if self._read_only and not self._tables_exist(conn):
                    return EpochHistory(self.sink_id)
                history, header, _ = self._read(conn, lock=False)
            if not self._read_only:
                self._check_generation(header)
            return history

        return self._io("read", read)

    def _tables_exist(self, conn: Conn) -> bool:
        row = conn.execute(
            "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename IN "
            "(%s, %s)",
            (self._cfg.control_schema, LOG_TABLE, LOG_HEAD_TABLE),
        ).fetchone()
        return row is not None and row[0] == 2

    # -- writing -------------------------------------------------------------------------
    def append(self, record: LogRecord) -> None:
        """Validate ``record`` and append it durably in one transaction (see module doc)."""
        if self._read_only:
            msg = f"epoch log {self._where} was opened read-only; it cannot be appended to"
            raise TxnError(msg, code=TxnCode.EPOCH_LOG)
        attempts = 0

        def write() -> None:
            nonlocal attempts
            attempts += 1
            conn = self._connection()
            with conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = on")
                history, header, rows = self._read(conn, lock=True)
                self._check_generation(header)
                if attempts > 1 and history.records and history.records[-1] == record:
                    return  # the previous attempt committed before its connection was lost
                self._append(conn, history, header, rows, record)

        self._io("append to", write)

    def _append(
        self,
        conn: Conn,
        history: EpochHistory,
        header: dict[str, Any],
        rows: Rows,
        record: LogRecord,
    ) -> None:
        """Make the table hold exactly the new history's records, numbered without a gap.

        Folding may drop stored records (a replaced query binding, compacted epochs) from
        anywhere in the log, not only its start: those rows are deleted, the rows kept
        before a gap move up (their order kept), and ``record`` takes ``next_seq``.
        """
        compacted = history.with_record(record).compacted(self._retain)  # illegal: no write
        held = {id(r) for r in compacted.records}
        kept = [seq for seq, r in rows if id(r) in held]
        dropped = [seq for seq, r in rows if id(r) not in held]
        numbered = [r for _, r in rows if id(r) in held] + [record]
        if [id(r) for r in compacted.records] != [id(r) for r in numbered]:  # pragma: no cover
            msg = f"cannot append {record} to {self._where}: folding reordered the records"
            raise TxnError(
                msg, code=TxnCode.EPOCH_LOG
            )  # folding keeps the order and the new record last
        seq = header["next_seq"]
        first = seq - len(kept)
        if dropped:
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE sink_id = %s AND seq = ANY(%s)").format(self._log),
                (self.sink_id, dropped),
            )
        move = sql.SQL("UPDATE {} SET seq = %s WHERE sink_id = %s AND seq = %s").format(self._log)
        for new, old in reversed(list(enumerate(kept, start=first))):
            if new != old:  # highest first: the target seq is always free by then
                conn.execute(move, (new, self.sink_id, old))
        conn.execute(
            sql.SQL("INSERT INTO {} (sink_id, seq, record) VALUES (%s, %s, %s)").format(self._log),
            (self.sink_id, seq, encode_record(record).decode()),
        )
        header.update(
            first_seq=first,
            next_seq=seq + 1,
            committed_through=compacted.committed_through,
            parallelism_floor=compacted.parallelism_floor,
        )
        self._write_header(conn, header, insert=False)

    def close(self) -> None:
        """Release the advisory lock and close the session. Idempotent.

        The lock is released explicitly: a closed session's backend exits asynchronously,
        and a coordinator started right after must not find the lock still held.
        """
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            if not self._read_only:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_advisory_unlock(%s)", (self._lock_key,))
            conn.close()
