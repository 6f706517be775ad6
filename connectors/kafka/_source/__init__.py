"""The Kafka connector's source: read_committed, on PySpark's Python Data Source API.

Public through :mod:`connectors.kafka`.
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

The source needs PySpark 4.2 or later (``_spark_api``); the classes built on PySpark's
data source API (:class:`KafkaRcDataSource` and its readers) are imported when first
asked for, so this package imports on older Spark and :func:`register` says what to upgrade.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ._arrow import arrow_schema as arrow_schema
from ._arrow import spark_schema as spark_schema
from ._bounds import OffsetBound as OffsetBound
from ._offsets import EARLIEST as EARLIEST
from ._offsets import LATEST as LATEST
from ._offsets import KafkaOffsets as KafkaOffsets
from ._options import SourceOptions as SourceOptions
from ._options import Subscription as Subscription
from ._ranges import OffsetRange as OffsetRange
from ._spark_api import (
    MINIMUM_SPARK as MINIMUM_SPARK,
)
from ._spark_api import (
    SOURCE_NAME as SOURCE_NAME,
)
from ._spark_api import (
    require_source_api as require_source_api,
)
from ._spark_api import (
    spark_has_source_api as spark_has_source_api,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ._source import KafkaBatchReader as KafkaBatchReader
    from ._source import KafkaInputPartition as KafkaInputPartition
    from ._source import KafkaRcDataSource as KafkaRcDataSource
    from ._source import KafkaStreamReader as KafkaStreamReader

# Built on PySpark's data source API: imported on first use (require_source_api).
SPARK_CLASSES = frozenset(
    {"KafkaBatchReader", "KafkaInputPartition", "KafkaRcDataSource", "KafkaStreamReader"}
)


def register(spark: SparkSession) -> str:
    """Register the ``kafka-rc`` format on ``spark`` and return the format name.

    Call once per SparkSession, before ``spark.read/readStream.format("kafka-rc")``.

    Raises:
        KafkaCode.SPARK_VERSION: the installed PySpark is older than :data:`MINIMUM_SPARK`.

    """
    require_source_api()
    from ._source import KafkaRcDataSource

    spark.dataSource.register(KafkaRcDataSource)
    return SOURCE_NAME


def spark_classes(module: str) -> Callable[[str], object]:
    """Return the module ``__getattr__`` of ``module`` that imports :data:`SPARK_CLASSES`.

    A class is imported on first use; on PySpark older than :data:`MINIMUM_SPARK` that
    raises :class:`KafkaCode.SPARK_VERSION`. Any other name raises ``AttributeError``.
    """

    def __getattr__(name: str) -> object:  # noqa: N807 - a module's __getattr__
        if name not in SPARK_CLASSES:
            msg = f"module {module!r} has no attribute {name!r}"
            raise AttributeError(msg)
        require_source_api()
        from . import _source

        return getattr(_source, name)

    return __getattr__


if not TYPE_CHECKING:
    __getattr__ = spark_classes(__name__)
