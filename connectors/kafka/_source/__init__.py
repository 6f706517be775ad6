"""The Kafka connector's source: read_committed, on PySpark's Python Data Source API.

Public through :mod:`connectors.kafka` (and the older alias ``connectors.kafka_source``).
Usage::

    from connectors.kafka import register

    register(spark)  # adds the format "kafka-rc"
    df = (
        spark.readStream.format("kafka-rc")
        .options(**kafka_options)  # the address and client settings, "kafka."-prefixed
        .option("subscribe", "orders")
        .load()
    )

``kafka_options`` holds the cluster's address and the librdkafka settings every client of
the source shares, under Spark's ``kafka.`` prefix (docs/kafka-source.md, "Options").
Options and output schema follow Spark's built-in ``kafka`` source; reads use
``isolation.level=read_committed`` so records of aborted transactions are never returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._arrow import arrow_schema, spark_schema
from ._errors import (
    DataLossError,
    KafkaReadTimeoutError,
    KafkaSourceError,
    KafkaSourceFatalError,
    KafkaUnavailableError,
    OffsetSpecError,
    SourceOptionError,
)
from ._offsets import EARLIEST, LATEST, KafkaOffsets
from ._options import OffsetBound, SourceOptions, Subscription
from ._ranges import KafkaInputPartition, OffsetRange
from ._source import SOURCE_NAME, KafkaBatchReader, KafkaRcDataSource, KafkaStreamReader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "EARLIEST",
    "LATEST",
    "SOURCE_NAME",
    "DataLossError",
    "KafkaBatchReader",
    "KafkaInputPartition",
    "KafkaOffsets",
    "KafkaRcDataSource",
    "KafkaReadTimeoutError",
    "KafkaSourceError",
    "KafkaSourceFatalError",
    "KafkaStreamReader",
    "KafkaUnavailableError",
    "OffsetBound",
    "OffsetRange",
    "OffsetSpecError",
    "SourceOptionError",
    "SourceOptions",
    "Subscription",
    "arrow_schema",
    "register",
    "spark_schema",
]


def register(spark: SparkSession) -> str:
    """Register the ``kafka-rc`` format on ``spark`` and return the format name.

    Call once per SparkSession, before ``spark.read/readStream.format("kafka-rc")``.
    """
    spark.dataSource.register(KafkaRcDataSource)
    return SOURCE_NAME
