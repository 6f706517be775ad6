"""The epoch's input offsets in the output's own transaction: ``sink_input_offsets``.

One row per (sink, input topic, input partition) in ``<control_schema>.sink_input_offsets``:
the ``end`` offset (exclusive: the next record to read) of the last epoch whose output
committed, and that epoch. Scheme (docs/architecture.md, section 11):

1. write partition 0's transaction upserts the rows of its plan's ``txn.InputOffsets``
   beside its marker, so they commit exactly when its rows do: the local commit
   (idempotency table) or ``COMMIT PREPARED`` (two-phase, after the coordinator's decision);
2. the upsert is guarded by ``epoch < EXCLUDED.epoch``: a redo of an older epoch never moves
   the offsets back;
3. readers take the rows of the sink's highest epoch (:func:`read_input_offsets`): every
   partition its input read (Spark's end offsets name all of them); rows of an older epoch
   are topics no longer read (a query bound with ``start_over``).

Nothing is written without exactly-once or without Kafka input (no offsets known).
"""

from __future__ import annotations

from psycopg import errors, sql

from connectors.postgres._connect import Conn
from connectors.postgres._control import qualified, run_ddl
from txn import EpochPlan

OFFSETS_TABLE = "sink_input_offsets"
# Write partition whose transaction carries the input offsets.
OFFSETS_PARTITION = 0


def ensure_offsets_table(conn: Conn, control_schema: str) -> None:
    """Create the offsets table if absent (after ``ensure_control_tables``)."""
    run_ddl(
        conn,
        [
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " sink_id text NOT NULL, topic text NOT NULL, kafka_partition integer NOT NULL,"
                " next_offset bigint NOT NULL, epoch bigint NOT NULL,"
                " committed_at timestamptz NOT NULL DEFAULT now(),"
                " PRIMARY KEY (sink_id, topic, kafka_partition))"
            ).format(qualified(control_schema, OFFSETS_TABLE))
        ],
    )


def write_input_offsets(conn: Conn, control_schema: str, sink_id: str, plan: EpochPlan) -> int:
    """In the open transaction: record ``plan``'s input ``end``; return the rows written."""
    if plan.input is None or not plan.input.end:
        return 0
    rows = [(sink_id, topic, part, offset, plan.epoch) for topic, part, offset in plan.input.end]
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL(
                "INSERT INTO {} AS o (sink_id, topic, kafka_partition, next_offset, epoch) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (sink_id, topic, kafka_partition) "
                "DO UPDATE SET next_offset = EXCLUDED.next_offset, epoch = EXCLUDED.epoch, "
                "committed_at = now() WHERE o.epoch < EXCLUDED.epoch"
            ).format(qualified(control_schema, OFFSETS_TABLE)),
            rows,
        )
    return len(rows)


def read_input_offsets(
    conn: Conn, control_schema: str, sink_id: str
) -> tuple[int, dict[tuple[str, int], int]] | None:
    """Return (epoch, ``{(topic, partition): next offset}``) of the sink's latest epoch.

    None when no epoch recorded offsets (or the table does not exist yet).
    """
    try:
        rows = conn.execute(
            sql.SQL(
                "SELECT topic, kafka_partition, next_offset, epoch FROM {} "
                "WHERE sink_id = %s AND epoch = (SELECT max(epoch) FROM {} WHERE sink_id = %s)"
            ).format(
                qualified(control_schema, OFFSETS_TABLE), qualified(control_schema, OFFSETS_TABLE)
            ),
            (sink_id, sink_id),
        ).fetchall()
    except errors.UndefinedTable:
        return None
    if not rows:
        return None
    return int(rows[0][3]), {(str(t), int(p)): int(o) for t, p, o, _ in rows}
