"""``connectors._arrow_schema.arrow_schema`` says what Spark's ``mapInArrow`` really delivers.

Checked against the batches of a real job on the installed PySpark (``make test-compat``
runs it on every supported line: before 4.2 PySpark's own ``to_arrow_schema`` says UTC
and small types, whatever the session), in a session time zone other than UTC, with
``spark.sql.execution.arrow.useLargeVarTypes`` off and on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from connectors._arrow_schema import arrow_schema

pytestmark = [pytest.mark.spark, pytest.mark.compat]

COLUMNS = (
    "CAST(id AS INT) AS i",
    "CAST(id AS STRING) AS s",
    "CAST(CAST(id AS STRING) AS BINARY) AS b",
    "TIMESTAMP '2024-01-02 03:04:05' AS ts",
    "TIMESTAMP_NTZ '2024-01-02 03:04:05' AS ntz",
    "array(CAST(id AS STRING)) AS strings",
    "named_struct('at', TIMESTAMP '2024-01-02 03:04:05', 'name', 'x') AS nested",
)


def _delivered(df: Any) -> pa.Schema:
    """The schema of the Arrow batches Spark hands a ``mapInArrow`` function over ``df``."""

    def describe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            schema = batch.schema.remove_metadata()
            yield pa.RecordBatch.from_pydict({"schema": [schema.serialize().to_pybytes()]})

    rows = df.mapInArrow(describe, "schema BINARY").collect()
    return pa.ipc.read_schema(pa.py_buffer(bytes(rows[0]["schema"])))


@pytest.mark.parametrize("large", [False, True])
def test_the_schema_is_the_one_spark_delivers(spark: Any, large: bool) -> None:
    zone, large_conf = "America/New_York", "spark.sql.execution.arrow.useLargeVarTypes"
    before = spark.conf.get("spark.sql.session.timeZone"), spark.conf.get(large_conf, "false")
    spark.conf.set("spark.sql.session.timeZone", zone)
    spark.conf.set(large_conf, str(large).lower())
    try:
        df = spark.range(1).selectExpr(*COLUMNS)
        delivered = _delivered(df)
        assert arrow_schema(df.schema, timezone=zone, large_types=large) == delivered
        assert delivered.field("ts").type == pa.timestamp("us", tz=zone)
    finally:
        spark.conf.set("spark.sql.session.timeZone", before[0])
        spark.conf.set(large_conf, before[1])
