"""``SqliteSink``: the connector (input check, resource, epoch log) and the user's class."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from connectors.examples.sqlite._config import SqliteSinkConfig
from connectors.examples.sqlite._database import prepare_database, table_columns
from connectors.examples.sqlite._errors import SqliteSinkError
from connectors.examples.sqlite._participant import SqliteResource
from connectors.stage import InputSpec, SinkConnector, StageCode, StageError, TransactionalSink
from txn import EpochLog, FileEpochLog

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

_SPARK_TYPES = (
    "tinyint",
    "smallint",
    "int",
    "bigint",
    "float",
    "double",
    "string",
    "boolean",
    "binary",
)


def check_input(
    schema: StructType, table: Sequence[str], order_by: Sequence[str] = ()
) -> InputSpec:
    """Check a Spark schema against the table's columns; errors name the column."""
    if not schema.fields:
        msg = "the DataFrame has no column to write"
        raise StageError(msg, code=StageCode.INPUT_SCHEMA)
    for f in schema.fields:
        if f.name not in table:
            msg = f"column {f.name!r} is not a column of the table (it has {list(table)})"
            raise StageError(msg, column=f.name, code=StageCode.INPUT_SCHEMA)
        kind = f.dataType.simpleString()
        if kind not in _SPARK_TYPES:
            msg = f"column {f.name!r} has type {kind}; this sink writes {', '.join(_SPARK_TYPES)}"
            raise StageError(msg, column=f.name, code=StageCode.INPUT_SCHEMA)
    return InputSpec(columns=tuple(f.name for f in schema.fields), order_by=tuple(order_by))


# --8<-- [start:connector]
class SqliteConnector(SinkConnector):
    """The SQLite part of :class:`SqliteSink`: input check, resource, epoch log, preflight."""

    def __init__(self, cfg: SqliteSinkConfig) -> None:
        self.cfg = cfg

    @property
    def sink_id(self) -> str:
        """The sink's identity."""
        return self.cfg.sink_id

    @property
    def options(self) -> SqliteSinkConfig:
        """The validated configuration (stage options included)."""
        return self.cfg

    def check_input(self, schema: StructType) -> InputSpec:
        """Check the DataFrame against the table, read anew every epoch."""
        return check_input(schema, table_columns(self.cfg), self.cfg.order_by)

    def resource(self, spec: InputSpec) -> SqliteResource:
        """Return the resource writing the spec's columns."""
        return SqliteResource(self.cfg, spec.columns)

    def open_epoch_log(self) -> EpochLog:
        """Open the coordinator's log: a file next to the database (driver-local)."""
        return FileEpochLog(self.cfg.epoch_log_path, sink_id=self.cfg.sink_id)

    def preflight(self) -> None:
        """Create the marker table, check the target table."""
        prepare_database(self.cfg)


class SqliteSink(TransactionalSink):
    """Exactly-once (or at-least-once / at-most-once) SQLite sink for ``foreachBatch``.

    ``options`` are the fields of :class:`SqliteSinkConfig`, validated here without I/O.
    """

    def __init__(
        self, path: str | os.PathLike[str], table: str, sink_id: str, **options: Any
    ) -> None:
        cfg = SqliteSinkConfig.build(path=path, table=table, sink_id=sink_id, **options)
        super().__init__(SqliteConnector(cfg))

    @property
    def config(self) -> SqliteSinkConfig:
        """The validated configuration (kept when the sink is pickled: it is the connector's)."""
        connector = self.connector
        if not isinstance(connector, SqliteConnector):  # pragma: no cover - set in __init__
            msg = "a SqliteSink always holds a SqliteConnector"
            raise SqliteSinkError(msg)
        return connector.cfg


# --8<-- [end:connector]
