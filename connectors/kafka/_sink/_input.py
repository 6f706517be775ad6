"""The Kafka sink's input: Spark's Kafka sink columns, checked on the driver.

Columns (as Spark's own Kafka sink): ``value`` (string or binary, required), ``key``,
``topic``, ``partition``, ``headers``; with ``changelog=True`` an ``op`` column and a key.
:func:`check_input` returns the stage's :class:`~connectors.stage.InputSpec`: the shipped
columns (and the ``dead_letter_source`` ones, when set), routing by key (rows without a key
by value), the configured order.
:func:`transform` applies the changelog rules before routing: ``update_before`` rows are
dropped, ``delete`` rows become tombstones (null value).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from connectors.kafka._errors import KafkaConnectorError
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._writer import RecordLayout
from connectors.stage import InputSpec, StageCode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

_STRING_OR_BINARY = ("string", "binary")


def _type_name(dtype: DataType) -> str:
    return str(dtype.simpleString())


def input_layout(schema: StructType, cfg: SinkConfig) -> RecordLayout:
    """Check ``schema`` (a Spark StructType); return which optional columns are present.

    Raises:
        StageCode.INPUT_SCHEMA: a required column is missing or a column has a wrong type.

    """
    types = {f.name: _type_name(f.dataType) for f in schema.fields}

    def check(name: str, allowed: Sequence[str], fix: str) -> None:
        if name in types and types[name] not in allowed:
            msg = (
                f"column {name!r} has type {types[name]}; the Kafka sink needs "
                f"{' or '.join(allowed)}: {fix}"
            )
            raise KafkaConnectorError(msg, column=name, code=StageCode.INPUT_SCHEMA)

    if "value" not in types:
        msg = (
            "the DataFrame has no 'value' column; select one, e.g. "
            "df.selectExpr('CAST(id AS STRING) AS key', 'to_json(struct(*)) AS value')"
        )
        raise KafkaConnectorError(msg, column="value", code=StageCode.INPUT_SCHEMA)
    if cfg.value_format is None:  # a formatted column: its format checks it (_formats)
        check("value", _STRING_OR_BINARY, "cast it, e.g. col('value').cast('string') or to_json")
    if cfg.key_format is None:
        check("key", _STRING_OR_BINARY, "cast it, e.g. col('key').cast('string')")
    check("topic", ("string",), "cast it with col('topic').cast('string')")
    check("partition", ("int",), "cast it with col('partition').cast('int')")
    check(
        "headers",
        ("array<struct<key:string,value:binary>>",),
        "build it as array(struct(lit('k').alias('key'), col('h').cast('binary').alias('value')))",
    )
    if cfg.topic is None and "topic" not in types:
        msg = "no default topic and no 'topic' column; pass topic= to KafkaSink or add the column"
        raise KafkaConnectorError(msg, column="topic", code=StageCode.INPUT_SCHEMA)
    if cfg.changelog:
        if "op" not in types:
            msg = (
                "changelog=True needs an 'op' column (insert / update_before / update_after / "
                "delete); add it or use changelog=False"
            )
            raise KafkaConnectorError(msg, column="op", code=StageCode.INPUT_SCHEMA)
        check("op", ("string",), "cast it with col('op').cast('string')")
        if "key" not in types:
            msg = "changelog=True needs a 'key' column: upserts and deletes are keyed"
            raise KafkaConnectorError(msg, column="key", code=StageCode.INPUT_SCHEMA)
    for name in cfg.order_by:
        if name not in types:
            msg = f"order_by names column {name!r}, which the DataFrame does not have"
            raise KafkaConnectorError(msg, column=name, code=StageCode.INPUT_SCHEMA)
    return RecordLayout(
        key="key" in types,
        topic="topic" in types,
        partition="partition" in types,
        headers="headers" in types,
        changelog=cfg.changelog,
    )


def data_columns(layout: RecordLayout) -> list[str]:
    """Return the columns shipped to the write tasks, in order."""
    names = ["key"] if layout.key else []
    names.append("value")
    names += [
        n
        for n, present in (
            ("topic", layout.topic),
            ("partition", layout.partition),
            ("headers", layout.headers),
            ("op", layout.changelog),
        )
        if present
    ]
    return names


_INTEGERS = ("tinyint", "smallint", "int", "bigint")


def check_source_columns(schema: StructType, cfg: SinkConfig) -> tuple[str, ...]:
    """Check the ``dead_letter_source`` columns of ``schema``; return them (or none).

    Raises:
        StageCode.INPUT_SCHEMA: a named column is missing or has a wrong type.

    """
    if cfg.dead_letter_source is None:
        return ()
    types = {f.name: _type_name(f.dataType) for f in schema.fields}
    wanted = zip(cfg.dead_letter_source, (("string",), _INTEGERS, _INTEGERS), strict=True)
    for name, allowed in wanted:
        if name not in types:
            msg = f"dead_letter_source names column {name!r}, which the DataFrame does not have"
            raise KafkaConnectorError(msg, column=name, code=StageCode.INPUT_SCHEMA)
        if types[name] not in allowed:
            msg = (
                f"dead_letter_source column {name!r} has type {types[name]}; it needs "
                f"{' or '.join(allowed)} (topic, partition, offset)"
            )
            raise KafkaConnectorError(msg, column=name, code=StageCode.INPUT_SCHEMA)
    return cfg.dead_letter_source


def check_input(schema: StructType, cfg: SinkConfig) -> InputSpec:
    """Check ``schema`` and return what the stage ships, how it routes and orders it."""
    layout = input_layout(schema, cfg)
    return InputSpec(
        columns=(*data_columns(layout), *check_source_columns(schema, cfg)),
        route_by=("key",) if layout.key else (),
        fallback=("value",),
        order_by=cfg.order_by,
        layout=layout,
    )


def transform(df: DataFrame, spec: InputSpec) -> DataFrame:
    """Apply the changelog rules (module docstring); other input passes unchanged."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias

    layout: RecordLayout = spec.layout
    if not layout.changelog:
        return df
    df = df.filter(~F.col("op").eqNullSafe(F.lit("update_before")))
    return df.withColumn(
        "value", F.when(F.col("op") == F.lit("delete"), F.lit(None)).otherwise(F.col("value"))
    )
