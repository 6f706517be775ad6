"""The Spark API the source is built on, and the check that names what is missing.

The ``kafka-rc`` source is a Python data source (``pyspark.sql.datasource``) whose stream
reader takes the batch's start and a read limit (``latestOffset(start, limit)``,
``pyspark.sql.streaming.datasource``): the start keeps a checkpointed partition from
moving backwards, the limit is ``maxOffsetsPerTrigger``. PySpark has both from 4.2 on
(4.0 and 4.1 have data sources whose ``latestOffset()`` sees neither). The rest of the kit
runs on older Spark too (README, "Supported Spark versions"), so the source's Spark classes
are imported only when they are asked for, and :func:`require_source_api` says what to
upgrade instead of an ``ImportError`` from inside PySpark.
"""

from __future__ import annotations

import importlib.util

from connectors.kafka._errors import KafkaCode, KafkaConnectorError

SOURCE_NAME = "kafka-rc"
"""The format name: ``spark.readStream.format("kafka-rc")`` after :func:`register`."""

MINIMUM_SPARK = "4.2"
"""The oldest PySpark whose Python data source API the source runs on."""

# The module that came with the stream reader's start offset and read limit (PySpark 4.2).
_STREAM_API = "pyspark.sql.streaming.datasource"


def spark_has_source_api() -> bool:
    """Whether the installed PySpark runs the ``kafka-rc`` source (4.2 or later)."""
    return importlib.util.find_spec(_STREAM_API) is not None


def require_source_api() -> None:
    """Raise ``KafkaCode.SPARK_VERSION`` unless the installed PySpark runs the source."""
    if spark_has_source_api():
        return
    import pyspark

    raise spark_version_error(pyspark.__version__)


def spark_version_error(installed: str) -> KafkaConnectorError:
    """Return the error of a PySpark (``installed``) older than :data:`MINIMUM_SPARK`."""
    msg = (
        f"the kafka-rc source needs PySpark {MINIMUM_SPARK} or later (its Python data source "
        f"API with read limits); the installed PySpark is {installed}. Upgrade PySpark "
        f"(pip install 'pyspark>={MINIMUM_SPARK}'), or read with Spark's built-in 'kafka' "
        "format (the kit's sinks run on this version)"
    )
    return KafkaConnectorError(msg, code=KafkaCode.SPARK_VERSION)
