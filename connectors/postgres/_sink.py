"""``PostgresSink``: the exactly-once PostgreSQL sink for ``foreachBatch``, on the generic stage."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from connectors._arrow_schema import arrow_schema
from connectors.postgres._classify import call_with_retry
from connectors.postgres._config import PostgresSinkConfig, WriteMode
from connectors.postgres._connect import connect, release_driver_connection
from connectors.postgres._ddl import apply_layout, planned_table
from connectors.postgres._epoch_log import PostgresEpochLog
from connectors.postgres._errors import PostgresSinkError
from connectors.postgres._resource import PostgresResource, prepare_resource
from connectors.postgres._schema import (
    TableInfo,
    TableLayout,
    check_input,
    describe_table,
    find_table,
    written_fields,
)
from connectors.stage import InputSpec, SinkConnector, StageCode, TransactionalSink
from txn import EpochLog, FileEpochLog

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("connectors.postgres")


def _arrow_schema(schema: StructType) -> pa.Schema:
    """Return the Arrow schema Spark's ``mapInArrow`` delivers for a Spark ``schema``.

    Timestamps carry the session time zone there, so they do here (the write tasks compare
    each batch's types with the checked ones).
    """
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    zone = session.conf.get("spark.sql.session.timeZone") if session is not None else None
    return arrow_schema(schema, timezone=zone or "UTC")


class PostgresConnector(SinkConnector):
    """The PostgreSQL part of :class:`PostgresSink`: input check, resource, epoch log.

    The resource (the commit protocol the server allows) is chosen at preflight, the
    table's definition is read on every epoch (an ALTER TABLE between epochs is seen);
    ``create_table`` / ``evolve_schema`` DDL runs in :meth:`before_plan`.
    """

    classifies_records = True

    def __init__(self, cfg: PostgresSinkConfig) -> None:
        self.cfg = cfg
        self._resource: PostgresResource | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"cfg": self.cfg, "_resource": None}  # the receiver runs its own preflight

    @property
    def sink_id(self) -> str:
        """The sink's identity."""
        return self.cfg.sink_id

    @property
    def options(self) -> PostgresSinkConfig:
        """The validated configuration (stage options included)."""
        return self.cfg

    def _table(self) -> TableInfo:
        with connect(self.cfg, "coordinator", autocommit=True) as conn:
            return describe_table(conn, self.cfg.schema, self.cfg.table)

    def _find_table(self) -> TableInfo | None:
        with connect(self.cfg, "coordinator", autocommit=True) as conn:
            return find_table(conn, self.cfg.schema, self.cfg.table)

    def check_input(self, schema: StructType) -> InputSpec:
        """Check the DataFrame against the table (errors name the column).

        ``order_by`` columns that the table does not have only order the rows; the others
        are written like any column. With ``create_table`` / ``evolve_schema`` the check is
        against the table as the sink's DDL will leave it (``_ddl``; the DDL itself runs in
        :meth:`before_plan`).
        """
        found = self._find_table()
        arrow = _arrow_schema(schema)
        for name in self.cfg.order_by:
            if arrow.get_field_index(name) < 0:
                msg = f"order_by names column {name!r}, which the DataFrame does not have"
                raise PostgresSinkError(msg, column=name, code=StageCode.INPUT_SCHEMA)
            if found is None or found.column(name) is None:
                arrow = arrow.remove(arrow.get_field_index(name))
        table = planned_table(found, written_fields(arrow, self.cfg), self.cfg)
        layout = check_input(arrow, table, self.cfg)
        shipped = layout.column_names + ((layout.op_column,) if layout.op_column else ())
        return InputSpec(
            columns=shipped, route_by=layout.keys, order_by=self.cfg.order_by, layout=layout
        )

    def before_plan(self, spec: InputSpec) -> None:
        """``create_table`` / ``evolve_schema``: create or evolve the table (own transaction)."""
        if not self.cfg.follows_stream:
            return

        def apply() -> None:
            with connect(self.cfg, "coordinator", autocommit=True) as conn:
                apply_layout(conn, self.cfg, spec.layout)

        call_with_retry(f"creating or evolving table {self.cfg.schema}.{self.cfg.table}", apply)

    def transform(self, df: DataFrame, spec: InputSpec) -> DataFrame:
        """Changelog input: drop ``update_before`` rows (the after-image carries the change)."""
        layout: TableLayout = spec.layout
        if self.cfg.write_mode is not WriteMode.CHANGELOG or layout.op_column is None:
            return df
        from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias

        return df.filter(~F.col(layout.op_column).eqNullSafe(F.lit("update_before")))

    def resource(self, spec: InputSpec) -> PostgresResource:
        """Return the resource writing rows shaped by ``spec`` (after preflight)."""
        if self._resource is None:
            self._resource = prepare_resource(self.cfg)
        return self._resource.with_layout(spec.layout)

    def open_epoch_log(self) -> EpochLog:
        """Open the epoch log table in the database (or the file log if ``epoch_log`` is set)."""
        if self.cfg.epoch_log is not None:
            return FileEpochLog(self.cfg.epoch_log, sink_id=self.cfg.sink_id)
        return PostgresEpochLog(self.cfg)

    def epoch_log_for(self, sink_id: str) -> EpochLog:
        """Open the epoch log table of ``sink_id`` in this sink's database."""
        return PostgresEpochLog(dataclasses.replace(self.cfg, sink_id=sink_id))

    def preflight(self) -> None:
        """Create the control tables, choose the commit protocol (logged), check the table.

        With ``create_table`` the table may not exist yet (:meth:`before_plan` creates it).
        """
        self._resource = prepare_resource(self.cfg)
        if not self.cfg.create_table:
            self._table()

    def close(self) -> None:
        """Close the coordinator's connection that finishes prepared transactions."""
        release_driver_connection(self.cfg)


class PostgresSink(TransactionalSink):
    """Exactly-once (or at-least-once / at-most-once) PostgreSQL sink for ``foreachBatch``.

    Usage::

        sink = PostgresSink("host=db dbname=app", "orders", sink_id="orders-pg",
                            write_mode="upsert", key_columns=["id"])
        df.writeStream.foreachBatch(sink).option("checkpointLocation", ck).start()

    ``options`` are the fields of :class:`PostgresSinkConfig` (validated here, without
    network I/O). Exactly-once by two-phase commit when the server allows prepared
    transactions (each task prepares, the driver commits after the decision), else by an
    idempotency table updated in each task's local transaction; the choice is logged at
    the first write. Protocol: docs/architecture.md; the connector: docs/postgres-sink.md.
    """

    def __init__(self, dsn: str, table: str, sink_id: str, **options: Any) -> None:
        cfg = PostgresSinkConfig.build(dsn=dsn, table=table, sink_id=sink_id, **options)
        super().__init__(PostgresConnector(cfg))

    @property
    def config(self) -> PostgresSinkConfig:
        """The validated configuration."""
        connector = self.connector
        if not isinstance(connector, PostgresConnector):  # pragma: no cover - set in __init__
            msg = "a PostgresSink always holds a PostgresConnector"
            raise PostgresSinkError(msg)
        return connector.cfg
