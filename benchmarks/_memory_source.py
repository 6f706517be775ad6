"""A Python data source that yields ``kafka-rc``'s rows from memory: Spark's own cost of a read.

``bench_source`` reads N records of a one-partition topic through Spark with ``kafka-rc``.
This source (``format("bench-memory-rows")``, option ``records``, ``value_bytes``,
``topic``) yields the same N rows, same schema, same Arrow batch size, same keys and values,
built column-wise with pyarrow instead of read from Kafka. Reading it into the ``noop``
sink is what Spark costs for taking those rows from any Python data source (planning,
scheduling, the Python worker, the Arrow hand-off to the JVM), with no Kafka at all: no
source on Spark's Python Data Source API reads them faster.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from connectors.kafka._source._arrow import arrow_schema, spark_schema
from connectors.kafka._source._fetch import ARROW_BATCH_ROWS

NAME = "bench-memory-rows"


class MemoryRowsReader(DataSourceReader):
    """One partition; batches of ``ARROW_BATCH_ROWS`` rows like the source's reads."""

    def __init__(self, records: int, value_bytes: int, topic: str) -> None:
        self.records, self.value_bytes, self.topic = records, value_bytes, topic

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        schema = arrow_schema(False)
        step = ARROW_BATCH_ROWS
        value = pa.array([b"x" * self.value_bytes] * step, pa.binary())
        topic = pa.array([self.topic] * step, pa.string())
        zeros = pa.array(np.zeros(step, np.int32))
        stamps = pa.array(np.zeros(step, np.int64)).cast(pa.timestamp("us", tz="UTC"))
        for start in range(0, self.records, step):
            n = min(step, self.records - start)
            offsets = pa.array(np.arange(start, start + n, dtype=np.int64))
            keys = pc.cast(offsets, pa.string()).view(pa.binary())  # b"%d" % offset
            columns = [keys, value[:n], topic[:n], zeros[:n], offsets, stamps[:n], zeros[:n]]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)


class MemoryRows(DataSource):
    """``spark.read.format("bench-memory-rows")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return spark_schema(False)

    def reader(self, schema: StructType) -> MemoryRowsReader:
        opts: Any = self.options
        return MemoryRowsReader(
            int(opts.get("records", "1")), int(opts.get("value_bytes", "0")), opts.get("topic", "")
        )
