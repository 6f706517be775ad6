"""The demo's application harness: the kit's streaming query, runnable as its own Spark app.

Part of the demo (an application, not a testing helper). Used by the demo (``python -m connectors.demo``), the end-to-end chaos tests, the soak run
and the benchmarks: input topics cut into chunk files, the query itself
(input -> ``KafkaSink``, ``PostgresSink``, or both in one epoch), the PostgreSQL table it
writes, and running it as a separate Spark application
(``python -m connectors.demo.app CONFIG``) that a test can kill.
"""

from connectors.demo.app._chunks import SCHEMA, SPARK_SCHEMA_DDL, chunk_input, write_chunks
from connectors.demo.app._config import (
    ICEBERG_TABLE,
    LAKE_FORMATS,
    ORDER_COLUMNS,
    POSTGRES_PROTOCOLS,
    POSTGRES_WRITE_MODES,
    SINK_BOTH,
    SINK_KAFKA,
    SINK_POSTGRES,
    SINKS,
    SOURCE_FILES,
    SOURCE_KAFKA,
    SOURCES,
    EpochLine,
    PipelineConfig,
    PipelineConfigError,
    lake_catalog,
    member_ids,
)
from connectors.demo.app._pipeline import build_sink, input_stream, make_spark, run_query
from connectors.demo.app._runner import AppProcess
from connectors.demo.app._tables import (
    CHANGELOG_OP_SQL,
    TABLE_COLUMNS,
    changelog_op,
    create_table,
    record_op,
    table_rows,
)

__all__ = [
    "CHANGELOG_OP_SQL",
    "ICEBERG_TABLE",
    "LAKE_FORMATS",
    "ORDER_COLUMNS",
    "POSTGRES_PROTOCOLS",
    "POSTGRES_WRITE_MODES",
    "SINKS",
    "SINK_BOTH",
    "SINK_KAFKA",
    "SINK_POSTGRES",
    "TABLE_COLUMNS",
    "SCHEMA",
    "SOURCE_FILES",
    "SOURCE_KAFKA",
    "SPARK_SCHEMA_DDL",
    "AppProcess",
    "EpochLine",
    "PipelineConfig",
    "PipelineConfigError",
    "SOURCES",
    "input_stream",
    "build_sink",
    "changelog_op",
    "chunk_input",
    "create_table",
    "lake_catalog",
    "make_spark",
    "member_ids",
    "record_op",
    "run_query",
    "table_rows",
    "write_chunks",
]
