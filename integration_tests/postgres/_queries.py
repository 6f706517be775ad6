"""Streaming queries over JSON files into a PostgreSQL table, and what the table holds.

The table ``t`` has no key, so a row written twice shows up twice: every check compares
the table with the multiset of rows the input files hold.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psycopg import sql

from connectors.postgres import PostgresSink

PER_FILE = 30
# Seconds a streaming query may take to drain its files on a busy machine.
QUERY_TIMEOUT_S = 300.0
# Seconds between two looks at a running query's progress.
POLL_S = 0.2


def table_sink(dsn: str, schema: str, **options: Any) -> PostgresSink:
    """A sink of table ``schema.t`` (id ``{schema}-s``, control tables in ``schema``).

    Two write partitions unless ``options`` say otherwise.
    """
    options = {"parallelism": 2, **options}
    return PostgresSink(dsn, "t", f"{schema}-s", schema=schema, control_schema=schema, **options)


def create_table(pg: Any, schema: str) -> None:
    pg.execute(
        sql.SQL("CREATE TABLE {}.t (id bigint NOT NULL, v text)").format(sql.Identifier(schema))
    )


def stage_files(directory: Path, first: int, files: int) -> None:
    """Write input files ``first .. first + files - 1`` (``PER_FILE`` rows each) to ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(first, first + files):
        lines = [
            json.dumps({"id": i, "v": f"v{i}"}) for i in range(f * PER_FILE, (f + 1) * PER_FILE)
        ]
        path = directory / f"part-{f:04d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))  # Spark reads oldest first


def start(
    spark: Any, source: Path, checkpoint: Path, sink: Any, *, available_now: bool = True
) -> Any:
    """Start a query writing one file per batch of ``source`` through ``sink``."""
    writer = (
        spark.readStream.schema("id LONG, v STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
    )
    trigger = {"availableNow": True} if available_now else {"processingTime": "200 milliseconds"}
    return writer.trigger(**trigger).start()


def run(spark: Any, source: Path, checkpoint: Path, sink: Any) -> None:
    """Run an ``availableNow`` query to its end; raise what made it fail."""
    query = start(spark, source, checkpoint, sink)
    query.awaitTermination(QUERY_TIMEOUT_S)
    assert not query.isActive, f"the query did not finish in {QUERY_TIMEOUT_S}s"


def table_rows(pg: Any, schema: str) -> Counter[tuple[int, str]]:
    rows = pg.execute(sql.SQL("SELECT id, v FROM {}.t").format(sql.Identifier(schema)))
    return Counter((int(i), str(v)) for i, v in rows.fetchall())


def file_rows(*files: range) -> Counter[tuple[int, str]]:
    """The rows the input files in ``files`` (ranges of file numbers) hold, once each."""
    return Counter(
        (i, f"v{i}") for fs in files for f in fs for i in range(f * PER_FILE, (f + 1) * PER_FILE)
    )


def wait_until(what: str, done: Callable[[], bool], timeout_s: float = QUERY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s}s")
        time.sleep(POLL_S)


def prepared_left(pg: Any) -> int:
    row = pg.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()
    return int(row[0]) if row else 0
