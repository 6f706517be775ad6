"""PostgreSQL bad records: the savepoint bisection and the dead-letter table, on a real server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
from psycopg import sql

from connectors.postgres import PostgresSinkConfig
from connectors.postgres._bad_records import (
    ensure_dead_letter_table,
    write_dead_letters,
    write_isolating,
)
from connectors.postgres._control import qualified
from connectors.postgres._schema import check_input, describe_table
from connectors.postgres._writer import BulkWriter
from connectors.stage import DeadLetterContext
from connectors.stage._bad_records import ERROR_CLASS_COLUMN
from integration_tests.postgres.conftest import Conn, with_hash

Make = Callable[..., PostgresSinkConfig]


def test_a_constraint_violation_among_1000_rows_isolates_exactly_the_bad_ones(
    pg: Conn, schema: str, make_cfg: Make
) -> None:
    pg.execute(
        sql.SQL("CREATE TABLE {} (id bigint, v bigint CHECK (v >= 0) NOT NULL)").format(
            qualified(schema, "t")
        )
    )
    ids = list(range(1000))
    values: list[Any] = [i for i in ids]
    for bad in (3, 500, 501, 999):
        values[bad] = -1
    values[700] = None  # NOT NULL: class 23 as well
    batch = with_hash({"id": pa.array(ids, pa.int64()), "v": pa.array(values, pa.int64())})
    cfg = make_cfg(on_bad_record="dead-letter")
    layout = check_input(batch.schema, describe_table(pg, cfg.schema, cfg.table), cfg)
    ensure_dead_letter_table(pg, schema, "dead_letters")
    with pg.transaction():
        rejected = write_isolating(
            pg, BulkWriter(pg, layout, None), [batch.slice(0, 400), batch.slice(400)], "test"
        )
        write_dead_letters(
            pg,
            schema,
            "dead_letters",
            rejected,
            DeadLetterContext(sink_id="s", epoch=4, partition=0, batch_id=4),
        )
    [records] = rejected
    assert records.column(0).to_pylist() == [3, 500, 501, 700, 999]
    assert set(records.column(records.schema.get_field_index(ERROR_CLASS_COLUMN)).to_pylist()) == {
        "constraint-violation"
    }
    written = pg.execute(
        sql.SQL("SELECT id FROM {} ORDER BY id").format(qualified(schema, "t"))
    ).fetchall()
    assert [r[0] for r in written] == [i for i in ids if i not in (3, 500, 501, 700, 999)]
    dead = pg.execute(
        sql.SQL(
            "SELECT record->>'id', error_class, epoch, batch_id FROM {} ORDER BY (record->>'id')::int"
        ).format(qualified(schema, "dead_letters"))
    ).fetchall()
    assert dead == [(str(i), "constraint-violation", 4, 4) for i in (3, 500, 501, 700, 999)]
