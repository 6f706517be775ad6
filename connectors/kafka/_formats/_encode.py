"""Task side: the formatted key/value columns of an Arrow batch turned into Confluent bytes.

:class:`BatchEncoder` replaces each formatted column of a batch by a binary column of
framed records (magic byte, the plan's schema id, the payload) before the Kafka writer sees
the batch; the writer is unchanged. The serializers are confluent-kafka's own
(``AvroSerializer``, ``JSONSerializer``, ``ProtobufSerializer``), built once per process
and column plan, on a :class:`~connectors.kafka._formats._registry.PinnedRegistry`: the
schema id comes from the plan, so a replay writes the same bytes, and the tasks never call
the registry.

Per row: the column is converted once with Arrow's ``to_pylist`` (its dicts are built in
C++), then the serializer is mapped over it (``map``: no Python loop of ours). Avro and
JSON take those dicts as they are; Protobuf builds the message from each dict (the library
serializes messages only). A row the serializer refuses raises
:class:`connectors.kafka.KafkaCode.RECORD_FORMAT` naming the column and row.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import pyarrow as pa

from connectors.kafka._client import scrub
from connectors.kafka._errors import KafkaCode, KafkaConnectorError
from connectors.kafka._formats._config import AVRO, JSON_SCHEMA
from connectors.kafka._formats._plan import ColumnPlan, FormatPlan, _strategy, context
from connectors.kafka._formats._registry import PinnedRegistry
from txn import has_code

# Characters of a serializer's complaint kept in a KafkaCode.RECORD_FORMAT (it may quote data).
_MAX_REASON = 300


@functools.lru_cache(maxsize=32)
def serializer(plan: ColumnPlan) -> Any:
    """Return the library's serializer for ``plan`` (cached per process)."""
    pinned = PinnedRegistry(plan.registered)
    conf: dict[str, Any] = {
        "auto.register.schemas": False,
        "subject.name.strategy": _strategy(plan.strategy),
    }
    if plan.kind == AVRO:
        from confluent_kafka.schema_registry.avro import AvroSerializer

        return AvroSerializer(pinned, plan.schema, conf=conf)
    if plan.kind == JSON_SCHEMA:
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        return JSONSerializer(plan.schema, pinned, conf=conf)
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    conf["use.deprecated.format"] = False
    return ProtobufSerializer(message_class(plan.message), pinned, conf)


@functools.lru_cache(maxsize=32)
def message_class(path: str | None) -> Any:
    """Import a Protobuf message class by its ``module:Class`` path (cached)."""
    from connectors.kafka._formats._config import PROTOBUF, RecordFormat

    return RecordFormat(kind=PROTOBUF, message=path).message_class()


def _protobuf_message(cls: Any, row: dict[str, Any] | None) -> Any:
    if row is None:
        return None
    return cls(**{k: v for k, v in row.items() if v is not None})


class BatchEncoder:
    """Encodes the formatted columns of a write task's batches (module docstring)."""

    def __init__(self, plan: FormatPlan) -> None:
        self._plan = plan

    def encode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Return ``batch`` with each formatted column replaced by its framed bytes."""
        arrays = list(batch.columns)
        names = batch.schema.names
        for col in self._plan.columns:
            idx = batch.schema.get_field_index(col.column)
            if idx < 0:
                continue
            arrays[idx] = pa.array(self._serialize(col, batch.column(idx)), type=pa.binary())
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def _serialize(self, col: ColumnPlan, array: pa.Array) -> list[bytes | None]:
        rows: Any = array.to_pylist()
        ser = serializer(col)
        ctx = context(col.topic, col.column)
        if col.kind not in (AVRO, JSON_SCHEMA):
            rows = map(functools.partial(_protobuf_message, message_class(col.message)), rows)
        out: list[bytes | None] = []
        try:
            # list.extend keeps what it appended before an exception: len(out) is the row.
            out.extend(map(ser, rows, itertools.repeat(ctx)))
        except Exception as exc:
            if has_code(
                exc, KafkaCode.SCHEMA_RESOLUTION
            ):  # the task would write otherwise than planned
                raise
            raise _row_error(col, len(out), exc) from None
        return out


def _row_error(col: ColumnPlan, row: int, exc: Exception) -> KafkaConnectorError:
    reason = scrub(f"{type(exc).__name__}: {exc}")[:_MAX_REASON]
    msg = (
        f"row {row} of the batch does not fit the {col.kind} writer schema of column "
        f"{col.column!r} (subject {col.subject!r}, schema id {col.schema_id}): {reason}. "
        "Fix the rows or the schema. The epoch was aborted."
    )
    return KafkaConnectorError(msg, column=col.column, code=KafkaCode.RECORD_FORMAT)
