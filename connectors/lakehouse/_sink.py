"""``DeltaSink`` and ``IcebergSink``: the connector of a table format on the generic stage.

:class:`TableConnector` is the same for both formats; a :class:`TableDriver` says how the
driver reads, creates and evolves the table and builds the picklable
:class:`~connectors.lakehouse._table.TableFormat` the write tasks get.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from connectors._arrow_schema import arrow_schema
from connectors.lakehouse._config import (
    CHANGELOG,
    DeltaSinkConfig,
    IcebergSinkConfig,
    TableSinkOptions,
)
from connectors.lakehouse._schema import TableLayout, check_layout
from connectors.lakehouse._table import TableDriver, TableResource
from connectors.stage import InputSpec, SinkConnector, TransactionalSink
from txn import EpochLog, FileEpochLog, TxnCode, TxnError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


def _session_arrow_schema(schema: StructType) -> pa.Schema:
    """Return the Arrow schema ``mapInArrow`` delivers (timestamps in the session time zone)."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    zone = session.conf.get("spark.sql.session.timeZone") if session is not None else None
    return arrow_schema(schema, timezone=zone or "UTC")


class TableConnector(SinkConnector):
    """The table format's part of a sink: input check, table DDL, resource, epoch log."""

    def __init__(self, cfg: TableSinkOptions, driver: TableDriver) -> None:
        self.cfg = cfg
        self.driver = driver

    @property
    def sink_id(self) -> str:
        """The sink's identity (the epoch the table records is this id's)."""
        return self.cfg.sink_id

    @property
    def options(self) -> TableSinkOptions:
        """The validated configuration (stage options included)."""
        return self.cfg

    def _partition_by(self, found: tuple[pa.Schema, tuple[str, ...]] | None) -> tuple[str, ...]:
        return self.cfg.partition_by if found is None else found[1]

    def check_input(self, schema: StructType) -> InputSpec:
        """Check the DataFrame against the table as it is now (read anew every epoch)."""
        found = self.driver.describe()
        layout = check_layout(
            _session_arrow_schema(schema),
            None if found is None else found[0],
            what=self.driver.name,
            order_by=self.cfg.order_by,
            partition_by=self._partition_by(found),
            create_table=self.cfg.create_table,
            evolve_schema=self.cfg.evolve_schema,
            keys=self.cfg.key_columns,
            op_column=self.cfg.op_column if self.cfg.write_mode == CHANGELOG else None,
        )
        return InputSpec(
            columns=layout.shipped,
            route_by=layout.keys,
            order_by=self.cfg.order_by,
            layout=layout,
        )

    def transform(self, df: DataFrame, spec: InputSpec) -> DataFrame:
        """Changelog input: drop ``update_before`` rows (the after-image carries the change)."""
        layout: TableLayout = spec.layout
        if layout.op_column is None:
            return df
        from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias

        return df.filter(~F.col(layout.op_column).eqNullSafe(F.lit("update_before")))

    def before_plan(self, spec: InputSpec) -> None:
        """``create_table`` / ``evolve_schema``: create the table or add the new columns."""
        layout: TableLayout = spec.layout
        if layout.create:
            self.driver.create(layout.schema, self.cfg.partition_by)
        elif layout.added:
            self.driver.add_columns(layout.schema, layout.added)

    def resource(self, spec: InputSpec) -> TableResource:
        """Return the resource writing rows shaped by ``spec`` (no I/O beyond reading the table)."""
        layout: TableLayout | None = spec.layout if isinstance(spec.layout, TableLayout) else None
        found = self.driver.describe()
        fmt = self.driver.table_format(layout, self._partition_by(found))
        return TableResource(fmt=fmt, app=self.cfg.sink_id, digest=self.cfg.fingerprint())

    def open_epoch_log(self) -> EpochLog:
        """Return the coordinator's log file (``epoch_log``, or beside the table)."""
        path = self.cfg.epoch_log or self.driver.default_epoch_log()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return FileEpochLog(path, sink_id=self.cfg.sink_id)


class DeltaSink(TransactionalSink):
    """Exactly-once Delta Lake sink for ``foreachBatch`` (extra ``[delta]``).

    Usage::

        sink = DeltaSink("/data/orders", sink_id="orders-delta", create_table=True)
        df.writeStream.foreachBatch(sink).option("checkpointLocation", ck).start()

    Write tasks write the epoch's rows as Parquet files under the table; the coordinator
    commits them in one Delta transaction per epoch carrying the app transaction
    ``(sink_id, epoch)`` (docs/delta-sink.md). ``options``: the fields of
    :class:`DeltaSinkConfig`, validated here without I/O.
    """

    def __init__(self, table_uri: str | os.PathLike[str], sink_id: str, **options: Any) -> None:
        from connectors.lakehouse._delta import DeltaDriver, deltalake

        cfg = DeltaSinkConfig.build(table_uri=table_uri, sink_id=sink_id, **options)
        deltalake()  # names the extra now, not in the first batch
        super().__init__(TableConnector(cfg, DeltaDriver(cfg)))

    @property
    def config(self) -> DeltaSinkConfig:
        """The validated configuration."""
        cfg = self.connector.options
        if not isinstance(cfg, DeltaSinkConfig):  # pragma: no cover - set in __init__
            msg = "a DeltaSink always holds a DeltaSinkConfig"
            raise TxnError(msg, code=TxnCode.CONFIG)
        return cfg


class IcebergSink(TransactionalSink):
    """Exactly-once Apache Iceberg sink for ``foreachBatch`` (extra ``[iceberg]``).

    Usage::

        sink = IcebergSink("db.orders", sink_id="orders-ice", catalog="prod")
        df.writeStream.foreachBatch(sink).option("checkpointLocation", ck).start()

    Write tasks write the epoch's rows as data files of the table; the coordinator commits
    one snapshot per epoch with the sink id and the epoch in its summary
    (docs/iceberg-sink.md). ``options``: the fields of :class:`IcebergSinkConfig`, validated
    here without I/O.
    """

    def __init__(self, table: str, sink_id: str, **options: Any) -> None:
        from connectors.lakehouse._iceberg import IcebergDriver, pyiceberg

        cfg = IcebergSinkConfig.build(table=table, sink_id=sink_id, **options)
        pyiceberg()  # names the extra now, not in the first batch
        super().__init__(TableConnector(cfg, IcebergDriver(cfg)))

    @property
    def config(self) -> IcebergSinkConfig:
        """The validated configuration."""
        cfg = self.connector.options
        if not isinstance(cfg, IcebergSinkConfig):  # pragma: no cover - set in __init__
            msg = "an IcebergSink always holds an IcebergSinkConfig"
            raise TxnError(msg, code=TxnCode.CONFIG)
        return cfg
