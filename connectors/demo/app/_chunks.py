"""Turn an input topic into numbered Parquet files: deterministic micro-batches for Spark.

The ``files`` input of the pipeline (``PipelineConfig.source="files"``): the end-to-end tests
and ``python -m connectors.demo --source files`` feed the streaming query with Spark's file
source, which lets a test decide exactly which records form which micro-batch and add input
between runs. (The demo's default, ``--source kafka``, reads the topic with the kit's
``kafka-rc`` source instead and needs no chunk files.)

1. read the input topic with ``read_committed`` to its end;
2. sort by (partition, offset) and cut into chunks of ``chunk_records`` records;
3. write chunk ``i`` to ``chunk-{i:06d}.parquet`` through a hidden temporary name (Spark's
   file source ignores names starting with a dot) and rename it, so Spark never sees a
   partial file; stamp modification times one second apart, since the file source takes new
   files oldest first: with ``maxFilesPerTrigger=1`` epoch ``N`` is exactly chunk ``N``.

Each row keeps its input position (``in_partition``, ``in_offset``), which the sink uses to
order rows within a write partition, so per-key output order follows the input.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from connectors.verify import Record, read_topic

SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("value", pa.binary()),
        ("in_partition", pa.int32()),
        ("in_offset", pa.int64()),
    ]
)
# Spark DDL of the same schema, for ``readStream.schema``.
SPARK_SCHEMA_DDL = "key STRING, value BINARY, in_partition INT, in_offset BIGINT"


def chunk_input(
    bootstrap: str,
    topic: str,
    input_dir: str | Path,
    chunk_records: int,
    *,
    first_chunk: int = 0,
    client_config: Mapping[str, str] | None = None,
) -> int:
    """Write every record of ``topic`` as chunk files from ``first_chunk`` on; return the count.

    ``client_config``: the settings of the reading consumer (the sink's option of that name).
    """
    records = read_topic(bootstrap, topic, client_config=client_config)
    return write_chunks(records, input_dir, chunk_records, first_chunk=first_chunk)


def write_chunks(
    records: Sequence[Record], input_dir: str | Path, chunk_records: int, *, first_chunk: int = 0
) -> int:
    """Write ``records`` as chunk files (module steps 2-3); return the number of files."""
    if chunk_records <= 0:
        msg = f"chunk_records must be positive, got {chunk_records}"
        raise ValueError(msg)
    folder = Path(input_dir)
    folder.mkdir(parents=True, exist_ok=True)
    ordered = sorted(records, key=lambda r: (r.partition, r.offset))
    base = int(time.time()) - 100_000  # in the past, one second apart per chunk
    count = 0
    for count, start in enumerate(range(0, len(ordered), chunk_records), start=1):
        index = first_chunk + count - 1
        chunk = ordered[start : start + chunk_records]
        table = pa.table(
            {
                "key": [None if r.key is None else r.key.decode() for r in chunk],
                "value": [r.value for r in chunk],
                "in_partition": [r.partition for r in chunk],
                "in_offset": [r.offset for r in chunk],
            },
            schema=SCHEMA,
        )
        final = folder / f"chunk-{index:06d}.parquet"
        tmp = folder / f".chunk-{index:06d}.parquet.tmp"
        pq.write_table(table, tmp)
        os.utime(tmp, (base + index, base + index))
        tmp.rename(final)
    return count
