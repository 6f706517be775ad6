"""The driver's and the tasks' access to the database file, and the marker table.

The marker table ``eos_markers`` holds one row per (sink, write partition, epoch): what the
partition committed in that epoch (row count, checksum), written in the same transaction
as the rows; a partition keeps only its last row.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from connectors.examples.sqlite._config import SqliteSinkConfig
from connectors.examples.sqlite._errors import SqliteCode, SqliteSinkError, classify, to_sink_error
from connectors.stage import RetryBound, retry
from txn import ErrorAction, Marker

T = TypeVar("T")

# Attempts of one driver-side call (creating the marker table, reading the table) on
# SQLITE_BUSY / SQLITE_LOCKED; each attempt already waited up to the busy timeout.
RETRY_ATTEMPTS = 3
# Seconds of exponential back-off between those attempts (first wait, upper bound): short,
# since each attempt has already waited for the lock itself.
RETRY_WAIT_MIN_S = 0.1
RETRY_WAIT_MAX_S = 2.0
MARKER_TABLE = "eos_markers"


def quote(name: str) -> str:
    """Return ``name`` quoted as an SQLite identifier."""
    return '"' + name.replace('"', '""') + '"'


def connect(cfg: SqliteSinkConfig) -> sqlite3.Connection:
    """Open the existing database file; transactions are explicit (``BEGIN IMMEDIATE``)."""
    uri = Path(cfg.path).as_uri() + "?mode=rw"  # never create an empty database by mistake
    return sqlite3.connect(
        uri, uri=True, timeout=cfg.busy_timeout_s, isolation_level=None, check_same_thread=False
    )


def _driver_call(cfg: SqliteSinkConfig, what: str, call: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``call`` on a new connection; retry SQLITE_BUSY/LOCKED, map the rest to typed errors."""

    def once() -> T:
        with contextlib.closing(connect(cfg)) as conn:
            return call(conn)

    bound = RetryBound(
        attempts=RETRY_ATTEMPTS,
        window_s=0.0,
        wait_min_s=RETRY_WAIT_MIN_S,
        wait_max_s=RETRY_WAIT_MAX_S,
    )
    try:
        return retry(
            once,
            bound=bound,
            retriable=lambda e: isinstance(e, sqlite3.Error) and classify(e) is ErrorAction.RETRY,
        )
    except sqlite3.Error as exc:
        if not os.path.exists(cfg.path):
            msg = f"the database file {cfg.path} does not exist; create it and table {cfg.table!r}"
            raise SqliteSinkError(msg, code=SqliteCode.TABLE_NOT_FOUND) from exc
        raise to_sink_error(exc, f"{what} of sink {cfg.sink_id!r}") from exc


def table_columns(cfg: SqliteSinkConfig) -> tuple[str, ...]:
    """Return the target table's column names (raise :class:`SqliteCode.TABLE_NOT_FOUND`)."""
    rows = _driver_call(
        cfg,
        "reading the table",
        lambda conn: conn.execute(f"PRAGMA table_info({quote(cfg.table)})").fetchall(),
    )  # quoted name
    if not rows:
        msg = f"table {cfg.table!r} does not exist in {cfg.path}; create it first"
        raise SqliteSinkError(msg, code=SqliteCode.TABLE_NOT_FOUND)
    return tuple(str(row[1]) for row in rows)


def prepare_database(cfg: SqliteSinkConfig) -> None:
    """Create the marker table if needed and check the target table (driver, before epoch 0)."""
    _driver_call(
        cfg,
        "creating the marker table",
        lambda conn: conn.execute(
            f"CREATE TABLE IF NOT EXISTS {MARKER_TABLE} (sink_id TEXT NOT NULL, "
            "write_partition INTEGER NOT NULL, epoch INTEGER NOT NULL, row_count INTEGER NOT NULL, "
            "checksum TEXT NOT NULL, PRIMARY KEY (sink_id, write_partition, epoch))"
        ),
    )
    table_columns(cfg)


def read_marker(conn: sqlite3.Connection, sink_id: str, partition: int) -> Marker | None:
    """Return the last epoch ``partition`` of ``sink_id`` committed, or None."""
    row = conn.execute(
        f"SELECT epoch, row_count, checksum FROM {MARKER_TABLE} WHERE sink_id = ? "  # noqa: S608
        "AND write_partition = ? ORDER BY epoch DESC LIMIT 1",
        (sink_id, partition),
    ).fetchone()
    return None if row is None else Marker(int(row[0]), int(row[1]), str(row[2]))


def read_markers(cfg: SqliteSinkConfig, partitions: int) -> dict[int, Marker]:
    """Return the committed marker of each write partition ``0..partitions-1`` that has one."""

    def read(conn: sqlite3.Connection) -> dict[int, Marker]:
        found = {p: read_marker(conn, cfg.sink_id, p) for p in range(partitions)}
        return {p: m for p, m in found.items() if m is not None}

    return _driver_call(cfg, "reading the markers", read)
