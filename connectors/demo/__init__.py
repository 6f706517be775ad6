"""The end-to-end demo of the exactly-once Kafka sink, and its reusable pipeline pieces.

``python -m connectors.demo`` (console script ``eos-demo``) runs a streaming query through
``KafkaSink`` against an embedded broker, optionally with chaos, and verifies the output.
The pieces are public because the end-to-end tests, the soak run and the benchmark reuse
them: staging input topics as chunk files, the query itself, and running it as a separate
Spark application that can be killed.
"""

from connectors.demo._pipeline import (
    ORDER_COLUMNS,
    SOURCES,
    EpochLine,
    PipelineConfig,
    PipelineConfigError,
    build_sink,
    input_stream,
    make_spark,
    run_query,
)
from connectors.demo._runner import AppProcess
from connectors.demo._staging import SCHEMA, SPARK_SCHEMA_DDL, stage_input, write_chunks

__all__ = [
    "ORDER_COLUMNS",
    "SCHEMA",
    "SPARK_SCHEMA_DDL",
    "AppProcess",
    "EpochLine",
    "PipelineConfig",
    "PipelineConfigError",
    "SOURCES",
    "input_stream",
    "build_sink",
    "make_spark",
    "run_query",
    "stage_input",
    "write_chunks",
]
