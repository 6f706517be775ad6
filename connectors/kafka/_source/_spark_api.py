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

from ._errors import SparkVersionError

__all__ = ["MINIMUM_SPARK", "SOURCE_NAME", "require_source_api", "spark_has_source_api"]

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
    """Raise :class:`SparkVersionError` unless the installed PySpark runs the source."""
    if spark_has_source_api():
        return
    import pyspark

    raise SparkVersionError(pyspark.__version__, MINIMUM_SPARK)
