"""The Kafka sink's bad records: which rows cannot be written, and their dead letters.

:class:`KafkaClassifier` (the stage's :class:`~connectors.stage.Classifier`) decides per
row, from the row and the sink's options alone (so a replay decides the same, and the
verdicts enter the partition's checksum, see ``connectors.stage._bad_records``):

* ``record`` (``StageCode.RECORD``): a null value where none is allowed (only ``op='delete'`` rows of a
  changelog are tombstones), a changelog op other than insert / update_after / delete
  (or null), a changelog row without a key, a row without a topic when the sink has no
  default topic;
* ``record-format`` (``KafkaCode.RECORD_FORMAT``): a formatted key or value that does not fit its writer schema
  (``key_format`` / ``value_format``; the formats' encoder, row by row only for a batch
  that has such a row);
* ``record-too-large`` (``KafkaCode.RECORD_TOO_LARGE``): key, value and headers larger than the producers'
  ``message.max.bytes`` minus :data:`RECORD_OVERHEAD_BYTES`, checked before producing
  (librdkafka would refuse the record, or the broker answer it, only later).

:func:`produce_dead_letters` writes the bad records to the dead-letter topic through the
write task's own producer, so inside its transaction: the original key and value (a
formatted column that failed its schema as the JSON of the row's value; an oversized key
or value cut to fit, with ``eos.dlq.key.length`` / ``eos.dlq.value.length`` saying its
length) and the original headers (those beyond the first that does not fit dropped, with
``eos.dlq.headers.dropped`` saying how many), plus the ``eos.dlq.*`` headers of :data:`HEADERS` and,
with the ``dead_letter_source`` option, the record's source coordinates
(``eos.dlq.source.topic`` / ``.partition`` / ``.offset``). docs/bad-records.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Producer

from connectors.kafka._errors import KafkaCode, KafkaConnectorError
from connectors.kafka._formats import FormatPlan
from connectors.kafka._formats._encode import BatchEncoder
from connectors.kafka._sink._config import DEAD_LETTER_SOURCE_HEADERS, SinkConfig
from connectors.kafka._sink._writer import (
    ALL_OPS,
    WRITTEN_OPS,
    DeliveryErrors,
    RecordLayout,
    RecordWriter,
)
from connectors.stage import BadRow, DeadLetterContext, StageCode
from connectors.stage._bad_records import ERROR_CLASS_COLUMN, ERROR_MESSAGE_COLUMN, drop_rows

# Bytes of a record's framing counted against message.max.bytes besides its key, value and
# headers (record batch header of 61 bytes, the record's varints, header key lengths);
# a margin above librdkafka's own accounting, so a record we let through is never refused.
RECORD_OVERHEAD_BYTES = 512
# Headers of a dead-lettered record (beside its original headers).
HEADERS = (
    "eos.dlq.error.class",
    "eos.dlq.error.message",
    "eos.dlq.sink.id",
    "eos.dlq.batch.id",
    "eos.dlq.epoch",
    "eos.dlq.write.partition",
    "eos.dlq.topic",
)
TRUNCATED_HEADER = "eos.dlq.value.length"
# Header of a dead letter whose key was cut to fit (the key's length in bytes).
TRUNCATED_KEY_HEADER = "eos.dlq.key.length"
# Header of a dead letter whose original headers did not all fit: how many were dropped
# (the headers from the first that does not fit on).
DROPPED_HEADERS_HEADER = "eos.dlq.headers.dropped"
# Bytes kept free in a dead letter for the length headers a cut adds.
TRUNCATION_SLACK_BYTES = 128
DEAD_LETTER_LAYOUT = RecordLayout(key=True, headers=True)


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    idx = batch.schema.get_field_index(name)
    return None if idx < 0 else batch.column(idx)


def _rows(mask: pa.Array) -> list[int]:
    return [int(i) for i in np.flatnonzero(np.asarray(pc.fill_null(mask, False)))]


class KafkaClassifier:
    """Per-row checks of the Kafka sink (module docstring); picklable, no clients."""

    def __init__(self, cfg: SinkConfig, layout: RecordLayout, formats: FormatPlan | None) -> None:
        self._layout = layout
        self._topic = cfg.topic
        self._max_bytes = cfg.message_max_bytes
        self._encoder = None if formats is None else BatchEncoder(formats)

    def classify(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, list[BadRow]]:
        """Return the good rows (encoded when formatted) and the bad rows of ``batch``."""
        bad = {b.index: b for b in self._check_values(batch)}
        rows = [i for i in range(batch.num_rows) if i not in bad]  # input row of each good row
        good = drop_rows(batch, sorted(bad))
        if self._encoder is not None:
            good, failed = self._encode(good)
            for j, message in failed:
                bad[rows[j]] = BadRow(rows[j], KafkaCode.RECORD_FORMAT.text, message)
            rows = [i for i in rows if i not in bad]
        large = self._too_large(good)
        for j, message in large:
            bad[rows[j]] = BadRow(rows[j], KafkaCode.RECORD_TOO_LARGE.text, message)
        return drop_rows(good, [j for j, _ in large]), [bad[i] for i in sorted(bad)]

    def _check_values(self, batch: pa.RecordBatch) -> list[BadRow]:
        layout, out = self._layout, []
        value = batch.column(batch.schema.get_field_index("value"))
        if layout.changelog:
            op = batch.column(batch.schema.get_field_index("op"))
            unknown = pc.invert(pc.fill_null(pc.is_in(op, value_set=pa.array(WRITTEN_OPS)), False))
            ops = op.to_pylist()
            out += [
                BadRow(
                    i, StageCode.RECORD.text, f"op {ops[i]!r} is not one of {', '.join(ALL_OPS)}"
                )
                for i in _rows(unknown)
            ]
            key = batch.column(batch.schema.get_field_index("key"))
            out += [
                BadRow(i, StageCode.RECORD.text, "a changelog row needs a key (upserts, deletes)")
                for i in _rows(pc.is_null(key))
            ]
            missing = pc.and_(pc.is_null(value), pc.not_equal(op, "delete"))
        else:
            missing = pc.is_null(value)
        out += [
            BadRow(i, StageCode.RECORD.text, "null value (only a changelog delete is a tombstone)")
            for i in _rows(missing)
        ]
        topic = _column(batch, "topic")
        if topic is not None and self._topic is None:
            out += [
                BadRow(i, StageCode.RECORD.text, "null topic and the sink has no default topic")
                for i in _rows(pc.is_null(topic))
            ]
        first: dict[int, BadRow] = {}
        for b in out:
            first.setdefault(b.index, b)
        return list(first.values())

    def _encode(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, list[tuple[int, str]]]:
        """Encode the formatted columns of the rows that fit; return the others' errors.

        The rows of a batch with a misfit are tried one by one to find every misfit (the
        encoder stops at the first), then the rest is encoded at once.
        """
        assert self._encoder is not None  # noqa: S101 - called only with formats
        try:
            return self._encoder.encode(batch), []
        except KafkaConnectorError as exc:
            if exc.code is not KafkaCode.RECORD_FORMAT:
                raise
        failed: list[tuple[int, str]] = []
        for i in range(batch.num_rows):
            try:
                self._encoder.encode(batch.slice(i, 1))
            except KafkaConnectorError as exc:
                if exc.code is not KafkaCode.RECORD_FORMAT:
                    raise
                failed.append((i, str(exc)))
        return self._encoder.encode(drop_rows(batch, [i for i, _ in failed])), failed

    def _too_large(self, batch: pa.RecordBatch) -> list[tuple[int, str]]:
        sizes = np.zeros(batch.num_rows, dtype=np.int64)
        for name in ("key", "value"):
            column = _column(batch, name)
            if column is not None:
                sizes += np.asarray(pc.fill_null(pc.binary_length(column), 0), dtype=np.int64)
        headers = _column(batch, "headers")
        if headers is not None and headers.null_count < len(headers):
            sizes += _header_bytes(headers)
        limit = self._max_bytes - RECORD_OVERHEAD_BYTES
        return [
            (
                int(i),
                f"record of {int(sizes[i])} bytes (key, value, headers) exceeds message.max.bytes"
                f"={self._max_bytes} minus {RECORD_OVERHEAD_BYTES} bytes of framing",
            )
            for i in np.flatnonzero(sizes > limit)
        ]


def _header_bytes(headers: pa.Array) -> np.ndarray[Any, Any]:
    """Bytes of each row's header keys and values (vectorized over the list column)."""
    flat = pc.list_flatten(headers)
    parents = np.asarray(pc.list_parent_indices(headers), dtype=np.int64)
    lengths = np.zeros(len(flat), dtype=np.int64)
    for field in ("key", "value"):
        lengths += np.asarray(
            pc.fill_null(pc.binary_length(pc.struct_field(flat, field)), 0), dtype=np.int64
        )
    return np.bincount(parents, weights=lengths, minlength=len(headers)).astype(np.int64)


def _bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def _cut(
    data: bytes | None, room: int, header: str, headers: list[dict[str, Any]]
) -> tuple[bytes | None, int]:
    """Cut ``data`` to ``room`` bytes, its length in ``header``; return it and the room left."""
    if data is None:
        return None, room
    if len(data) > room:
        headers.append({"key": header, "value": str(len(data)).encode()})
        data = data[: max(0, room)]
    return data, room - len(data)


def _size(headers: list[dict[str, Any]]) -> int:
    return sum(len(h["key"]) + len(h["value"] or b"") for h in headers)


def _fitting(headers: list[dict[str, Any]], room: int) -> list[dict[str, Any]]:
    """Return the leading ``headers`` that fit in ``room`` bytes (all of them if they fit)."""
    kept: list[dict[str, Any]] = []
    for h in headers:
        room -= len(h["key"]) + len(h["value"] or b"")
        if room < 0:
            break
        kept.append(h)
    return kept


def dead_letter_batch(
    records: pa.RecordBatch,
    context: DeadLetterContext,
    topic: str | None,
    max_bytes: int,
    source: tuple[str, ...] = (),
) -> pa.RecordBatch:
    """Return the dead-letter records of ``records`` (bad rows with their error columns).

    ``source``: the ``dead_letter_source`` columns, whose values go into the
    :data:`~connectors.kafka._sink._config.DEAD_LETTER_SOURCE_HEADERS` (nulls left out).
    """
    cols = {n: records.column(i).to_pylist() for i, n in enumerate(records.schema.names)}
    n = records.num_rows
    names = (*HEADERS, *DEAD_LETTER_SOURCE_HEADERS[: len(source)])
    keys = [_bytes(k) for k in cols.get("key", [None] * n)]
    values = [_bytes(v) for v in cols["value"]]
    all_headers = []
    for i in range(n):
        ours = [
            cols[ERROR_CLASS_COLUMN][i],
            cols[ERROR_MESSAGE_COLUMN][i],
            context.sink_id,
            context.batch_id,
            context.epoch,
            context.partition,
            (cols.get("topic") or [None] * n)[i] or topic,
            *(cols[c][i] for c in source),
        ]
        headers = [
            {"key": h, "value": str(v).encode()}
            for h, v in zip(names, ours, strict=True)
            if v is not None
        ]
        room = max_bytes - RECORD_OVERHEAD_BYTES - TRUNCATION_SLACK_BYTES - _size(headers)
        original = list((cols.get("headers") or [None] * n)[i] or ())
        kept = _fitting(original, room)
        if len(kept) < len(original):
            dropped = str(len(original) - len(kept)).encode()
            headers.append({"key": DROPPED_HEADERS_HEADER, "value": dropped})
        headers = kept + headers
        room -= _size(kept)
        keys[i], room = _cut(keys[i], room, TRUNCATED_KEY_HEADER, headers)
        values[i], _ = _cut(values[i], room, TRUNCATED_HEADER, headers)
        all_headers.append(headers)
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, type=pa.binary()),
            pa.array(values, type=pa.binary()),
            pa.array(all_headers, type=header_type),
        ],
        names=["key", "value", "headers"],
    )


class _DeadLetterWriter(RecordWriter):
    """The produce loop for dead letters: no validation (a null value is kept as it was)."""

    def _validate(self, batch: pa.RecordBatch) -> None:
        return None


def produce_dead_letters(
    producer: Producer,
    errors: DeliveryErrors,
    cfg: SinkConfig,
    records: Sequence[pa.RecordBatch],
    context: DeadLetterContext,
) -> int:
    """Produce ``records`` to the dead-letter topic with ``producer``; return how many."""
    topic = cfg.dead_letter_topic
    assert topic is not None  # noqa: S101 - the config requires it with dead-letter
    writer = _DeadLetterWriter(producer, errors, DEAD_LETTER_LAYOUT, topic)
    return writer.write(
        dead_letter_batch(
            r, context, cfg.topic, cfg.message_max_bytes, cfg.dead_letter_source or ()
        )
        for r in records
    )
