"""Async I/O enrichment for PySpark: Flink's Async I/O operator over Arrow batches.

``async_map(df, fn, output_schema=..., config=AsyncConfig(...))`` calls an ``async def``
function for each row (or chunk of rows) with up to ``capacity`` requests in flight per
partition, ordered or unordered output, the end of each Arrow batch as a fence, a
timeout with a chosen outcome, and bounded retries. ``AsyncOperator`` is the same
engine without Spark. See docs/async-io.md.
"""

from connectors.async_io._config import AsyncConfig, OnTimeout, RetryPolicy
from connectors.async_io._errors import AsyncCode, AsyncIOError
from connectors.async_io._function import AsyncFunction
from connectors.async_io._metrics import AsyncMetrics
from connectors.async_io._operator import AsyncOperator
from connectors.async_io._spark import MetricsAccumulator, async_map

__all__ = [
    "MetricsAccumulator",
    "AsyncConfig",
    "AsyncFunction",
    "AsyncCode",
    "AsyncIOError",
    "AsyncMetrics",
    "AsyncOperator",
    "OnTimeout",
    "RetryPolicy",
    "async_map",
]
