"""The PostgreSQL side of an end-to-end scenario: the table, its sink options, its checks.

A :class:`TableSide` is one table ``t`` in a schema of the test's own, holding the sink's
control tables too (markers, epoch log table), so tests never see each other's state. It
gives the ``PipelineConfig`` overrides that point the query at it, and reads back what the
invariants need: the table check, the sink's prepared transactions, which input epochs the
table shows.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from connectors.demo.app._tables import create_table, record_op
from connectors.postgres._twophase import list_prepared
from connectors.verify import Record, TableReport, check_table, print_report

TABLE = "t"


@dataclass
class TableSide:
    """The table a scenario's query writes (see the module docstring)."""

    dsn: str
    schema: str
    write_mode: str = "append"

    def create(self) -> TableSide:
        create_table(self.dsn, TABLE, schema=self.schema, write_mode=self.write_mode)
        return self

    def options(self, protocol: str = "auto") -> dict[str, Any]:
        """``PipelineConfig`` fields of a query writing this table."""
        return {
            "postgres_dsn": self.dsn,
            "postgres_table": TABLE,
            "postgres_schema": self.schema,
            "postgres_control_schema": self.schema,
            "postgres_write_mode": self.write_mode,
            "postgres_protocol": protocol,
        }

    def check(self, sink_id: str, inputs: Sequence[Record], **kwargs: Any) -> TableReport:
        report = check_table(
            self.dsn,
            table=TABLE,
            schema=self.schema,
            control_schema=self.schema,
            sink_id=sink_id,
            inputs=inputs,
            write_mode=self.write_mode,
            op_fn=record_op if self.write_mode == "changelog" else None,
            **kwargs,
        )
        print_report(report)
        return report

    def prepared(self, sink_id: str) -> list[tuple[int, int]]:
        """(epoch, partition) of every prepared transaction of ``sink_id`` left in the server."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return [(g.epoch, g.partition) for g in list_prepared(conn, sink_id)]

    def ids(self) -> list[int]:
        """The record ids in the table (one per row)."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute(
                sql.SQL("SELECT id FROM {}.{}").format(
                    sql.Identifier(self.schema), sql.Identifier(TABLE)
                )
            ).fetchall()
        return [int(r[0]) for r in rows]


def epochs_of(ids: Sequence[int], epoch_of: dict[int, int]) -> Counter[int]:
    """Count the rows of each input epoch among ``ids``."""
    return Counter(epoch_of[i] for i in ids)


def record_ids(records: Sequence[Record]) -> list[int]:
    """The JSON ids of ``records``."""
    return [int(json.loads(r.value or b"{}")["id"]) for r in records]


@contextlib.contextmanager
def sibling_schema(dsn: str, schema: str, suffix: str) -> Iterator[str]:
    """A second schema ``{schema}_{suffix}`` for a test that runs cases side by side.

    Named after the ``schema`` fixture's schema, so that fixture's clean-up also rolls back
    the prepared leftovers of a sink whose id starts with it; dropped at the end.
    """
    name = f"{schema}_{suffix}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
