"""The sink's own tables, all in the control schema (``eos`` by default), created on demand.

* ``sink_markers``: the idempotency table, one row per (sink, write partition): the last
  epoch the partition committed, its row count and checksum. Updated in the same
  transaction as the data, in both commit protocols (see ``_markers``).
* ``epoch_log`` / ``epoch_log_head``: the records and the sealed header of every sink's
  epoch log (see ``_epoch_log``).
* ``stage_<digest>``: unlogged load tables of upserts and changelogs, one per (sink,
  partition, column layout) (see ``_writer``).

DDL runs under a transaction-level advisory lock, so concurrent first uses (several
tasks, or a task and the driver) never race on ``CREATE ... IF NOT EXISTS``.
"""

from __future__ import annotations

import hashlib

from psycopg import sql

from connectors.postgres._connect import Conn

MARKER_TABLE = "sink_markers"
LOG_TABLE = "epoch_log"
LOG_HEAD_TABLE = "epoch_log_head"
# Name prefix of the load tables (the value predates the name: tables of existing sinks keep it).
LOAD_TABLE_PREFIX = "stage_"
# Advisory lock key serializing the sink's DDL (an arbitrary constant: "eosddl" in ASCII).
DDL_LOCK_KEY = 0x656F7364646C


def qualified(schema: str, name: str) -> sql.Composed:
    """``"schema"."name"``, quoted."""
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))


def advisory_key(*parts: object) -> int:
    """Return a signed 64-bit advisory lock key derived from ``parts`` (stable across processes)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def run_ddl(conn: Conn, statements: list[sql.Composed]) -> None:
    """Run DDL statements in one transaction under the DDL advisory lock."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (DDL_LOCK_KEY,))
        for statement in statements:
            conn.execute(statement)


def ensure_control_tables(conn: Conn, schema: str) -> None:
    """Create the control schema, the idempotency table and the epoch log tables if absent."""
    run_ddl(
        conn,
        [
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " sink_id text NOT NULL, write_partition integer NOT NULL,"
                " epoch bigint NOT NULL, row_count bigint NOT NULL, checksum text NOT NULL,"
                " attempt integer NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(),"
                " PRIMARY KEY (sink_id, write_partition))"
            ).format(qualified(schema, MARKER_TABLE)),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " sink_id text NOT NULL, seq bigint NOT NULL, record text NOT NULL,"
                " PRIMARY KEY (sink_id, seq))"
            ).format(qualified(schema, LOG_TABLE)),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (sink_id text PRIMARY KEY, header text NOT NULL)"
            ).format(qualified(schema, LOG_HEAD_TABLE)),
        ],
    )


def load_table_name(sink_id: str, partition: int, layout_digest: str) -> str:
    """Name of the load table of one (sink, partition, column layout): at most 63 bytes."""
    digest = hashlib.sha256(f"{sink_id}\0{partition}\0{layout_digest}".encode()).hexdigest()
    return f"{LOAD_TABLE_PREFIX}{digest[:24]}"
