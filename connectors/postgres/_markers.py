"""The idempotency table: "write partition p of sink s committed epoch N with this content".

One row per (sink, partition) in ``<control_schema>.sink_markers``. Scheme (the same
redo-or-skip rule as the Kafka markers, see docs/architecture.md):

1. ``ensure_marker_row`` creates the row once (epoch -1: nothing committed yet), outside
   any data transaction, so later writers always find a row to lock;
2. in the data transaction, ``lock_marker`` takes the row lock first (``SELECT ... FOR
   UPDATE``): a second live instance of the partition blocks here, before it writes
   anything, and when it gets the lock it sees the first one's committed epoch and stops
   (:class:`PostgresCode.PARTITION_CONFLICT`);
3. ``write_marker`` updates the row in the same transaction as the data, guarded by
   ``epoch < N``: the marker becomes visible exactly when the data does (local commit, or
   COMMIT PREPARED), so it is the single source of truth for "did p commit N?".

Both commit protocols write it: in two-phase mode it lets ``commit_prepared`` tell "already
committed" from "lost" when a gid is missing, and lets the protocol change between runs.
"""

from __future__ import annotations

from psycopg import sql

from connectors.postgres._connect import Conn
from connectors.postgres._control import MARKER_TABLE, qualified
from connectors.postgres._errors import PostgresCode, PostgresSinkError
from txn import Marker

NO_EPOCH = -1


def _table(control_schema: str) -> sql.Composed:
    return qualified(control_schema, MARKER_TABLE)


def ensure_marker_row(conn: Conn, control_schema: str, sink_id: str, partition: int) -> None:
    """Create the partition's marker row (epoch -1) if absent; autocommit connection."""
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (sink_id, write_partition, epoch, row_count, checksum, attempt) "
            "VALUES (%s, %s, %s, 0, '', 0) ON CONFLICT DO NOTHING"
        ).format(_table(control_schema)),
        (sink_id, partition, NO_EPOCH),
    )


def _marker(row: tuple[int, int, str] | None) -> Marker | None:
    if row is None or row[0] == NO_EPOCH:
        return None
    return Marker(epoch=int(row[0]), rows=int(row[1]), checksum=str(row[2]))


def read_marker(conn: Conn, control_schema: str, sink_id: str, partition: int) -> Marker | None:
    """Return the partition's committed marker, or None if it never committed."""
    row = conn.execute(
        sql.SQL(
            "SELECT epoch, row_count, checksum FROM {} WHERE sink_id = %s AND write_partition = %s"
        ).format(_table(control_schema)),
        (sink_id, partition),
    ).fetchone()
    return _marker(row)


def read_markers(conn: Conn, control_schema: str, sink_id: str) -> dict[int, Marker]:
    """Every committed marker of the sink, by partition (for checkers and tests)."""
    rows = conn.execute(
        sql.SQL(
            "SELECT write_partition, epoch, row_count, checksum FROM {} "
            "WHERE sink_id = %s AND epoch <> %s ORDER BY write_partition"
        ).format(_table(control_schema)),
        (sink_id, NO_EPOCH),
    ).fetchall()
    return {int(p): Marker(int(e), int(n), str(c)) for p, e, n, c in rows}


def lock_marker(conn: Conn, control_schema: str, sink_id: str, partition: int, epoch: int) -> None:
    """In the open transaction: lock the marker row; refuse if ``epoch`` is already covered."""
    row = conn.execute(
        sql.SQL(
            "SELECT epoch FROM {} WHERE sink_id = %s AND write_partition = %s FOR UPDATE"
        ).format(_table(control_schema)),
        (sink_id, partition),
    ).fetchone()
    if row is None:
        msg = (
            f"sink {sink_id!r} partition {partition}: its marker row is missing (deleted from "
            f"{control_schema}.{MARKER_TABLE} while the sink ran?); the epoch is aborted"
        )
        raise PostgresSinkError(msg, code=PostgresCode.PARTITION_CONFLICT)
    if row[0] >= epoch:
        msg = (
            f"sink {sink_id!r} partition {partition}: epoch {row[0]} is already committed, so "
            f"epoch {epoch} must not be written again (another instance of this partition "
            "committed it meanwhile); this instance stops"
        )
        raise PostgresSinkError(msg, code=PostgresCode.PARTITION_CONFLICT)


def write_marker(
    conn: Conn, control_schema: str, sink_id: str, partition: int, marker: Marker, attempt: int
) -> None:
    """In the open transaction: record ``marker`` (guarded by ``epoch < marker.epoch``)."""
    cur = conn.execute(
        sql.SQL(
            "UPDATE {} SET epoch = %s, row_count = %s, checksum = %s, attempt = %s, "
            "committed_at = now() WHERE sink_id = %s AND write_partition = %s AND epoch < %s"
        ).format(_table(control_schema)),
        (marker.epoch, marker.rows, marker.checksum, attempt, sink_id, partition, marker.epoch),
    )
    if cur.rowcount != 1:
        msg = (
            f"sink {sink_id!r} partition {partition}: the marker already covers epoch "
            f"{marker.epoch}; another instance committed it, this one stops"
        )
        raise PostgresSinkError(msg, code=PostgresCode.PARTITION_CONFLICT)
