"""The produce loop of a write task: Arrow batches in, Kafka records out.

Steps per batch:

1. validate it vectorized (null values, unknown changelog ops, missing keys or
   topics) and raise a :class:`StageCode.RECORD` naming the column and the fix;
2. convert the needed columns once with ``to_pylist()``; string keys and values as their
   UTF-8 bytes (a zero-copy cast to binary first: no decoding into ``str`` and no
   encoding back in ``produce``, the same bytes on the wire);
3. produce: rows with only a key and a value go through ``Producer.produce`` driven by
   ``map`` (a loop in C, no Python bytecode per row); other rows through a Python loop.
   On ``BufferError`` (the bounded producer queue is full) serve delivery reports with
   ``poll`` and retry from the row that did not fit, so Python never buffers more than
   one Arrow batch. When ``produce`` refuses a row of the sink's own topic as unknown (a
   restarted broker reloading its topics answers metadata without it), the row is
   retried the same way until the topic is back, for at most ``BROKER_RESTART_WAIT_S``,
   the producer asking the brokers for the topic once a second meanwhile
   (``TopicRefresher``: a long-lived producer may keep a stale verdict after the broker
   has the topic back, issue 38); a partition refused as unknown is asked for once and
   tried again (a partition count older than the topic's); a topic taken from the row's
   ``topic`` column is the row's error at once. There is
   no ``poll`` between batches: librdkafka keeps delivered
   messages counted against the queue limits until they are served, so a full queue
   (``BufferError``) or :meth:`RecordWriter.flush` serves them;
4. delivery failures are collected by one callback (librdkafka reports only errors)
   and raised, typed, by :meth:`RecordWriter.flush`.

Why not ``Producer.produce_batch`` (confluent-kafka 2.16): it takes one dict per message
(built in Python, then parsed field by field in C) and reports failed messages by adding
an ``_error`` key to their dicts instead of raising; measured, it enqueues slower than
``produce`` (see benchmarks/HISTORY.md), and it cannot carry headers.
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import operator
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, KafkaException, Producer

from connectors.kafka._client import (
    BROKER_RESTART_WAIT_S,
    FATAL,
    STALE_REFRESH_S,
    TIMED_OUT,
    UNKNOWN_PARTITION,
    UNKNOWN_TOPIC,
    TopicRefresher,
    code_of,
    stale_topic_verdict,
    to_write_error,
)
from connectors.kafka._errors import KafkaCode, KafkaConnectorError
from connectors.stage import StageCode
from txn import ErrorAction

# Seconds one poll waits for the producer queue to drain when it is full (back-pressure).
BACKPRESSURE_POLL_S = 0.05
# Changelog operations that produce a record (update_before rows are dropped in Spark).
WRITTEN_OPS = ("insert", "update_after", "delete")
ALL_OPS = (*WRITTEN_OPS, "update_before")

_log = logging.getLogger("connectors.kafka.sink")


@dataclass(frozen=True, kw_only=True)
class RecordLayout:
    """Which of the optional input columns the DataFrame has (decided on the driver)."""

    key: bool = False
    topic: bool = False
    partition: bool = False
    headers: bool = False
    changelog: bool = False


class DeliveryErrors:
    """Delivery-report callback that keeps the first failed delivery."""

    def __init__(self) -> None:
        self.first: tuple[KafkaError, Any] | None = None
        self.count = 0

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.count += 1
            if self.first is None:
                self.first = (err, msg)


def _too_large(exc: KafkaError, key: object, value: object) -> KafkaConnectorError:
    key_len = len(key) if isinstance(key, (bytes, str)) else 0
    value_len = len(value) if isinstance(value, (bytes, str)) else 0
    column = "key" if key_len > value_len else "value"
    msg = (
        f"a record is too large for Kafka (key {key_len} bytes, value {value_len} bytes; "
        f"{exc.str()}): column {column!r} holds the oversized data. Split or shrink such "
        "records, or raise the limits: producer_config={'message.max.bytes': ...} and the "
        "topic's max.message.bytes on the broker. The epoch was aborted."
    )
    return KafkaConnectorError(msg, column=column, code=KafkaCode.RECORD_TOO_LARGE)


def _headers(raw: object) -> list[tuple[str, bytes | None]] | None:
    if raw is None:
        return None
    return [(h["key"], h["value"]) for h in raw]  # type: ignore[attr-defined]


class RecordWriter:
    """Produces the rows of one task through ``producer`` (see module docstring)."""

    def __init__(
        self, producer: Producer, errors: DeliveryErrors, layout: RecordLayout, topic: str | None
    ) -> None:
        self._producer = producer
        self._errors = errors
        self._layout = layout
        self._topic = topic
        self._refresher = TopicRefresher(producer)
        self.rows = 0

    # -- validation ---------------------------------------------------------------
    def _validate(self, batch: pa.RecordBatch) -> None:
        layout = self._layout
        value = batch.column(batch.schema.get_field_index("value"))
        if layout.changelog:
            op = batch.column(batch.schema.get_field_index("op"))
            bad = pc.invert(pc.fill_null(pc.is_in(op, value_set=pa.array(WRITTEN_OPS)), False))
            if pc.any(bad).as_py():
                sample = pc.filter(op, bad)[0].as_py()
                msg = (
                    f"column 'op' holds {sample!r}; a changelog row's op must be one of "
                    f"{', '.join(ALL_OPS)}. The epoch was aborted."
                )
                raise KafkaConnectorError(msg, column="op", code=StageCode.RECORD)
            key = batch.column(batch.schema.get_field_index("key"))
            if key.null_count:
                msg = (
                    f"column 'key' is null in {key.null_count} changelog row(s); upserts and "
                    "deletes need a key. Filter or fill null keys. The epoch was aborted."
                )
                raise KafkaConnectorError(msg, column="key", code=StageCode.RECORD)
            missing = pc.and_(pc.is_null(value), pc.not_equal(op, "delete"))
            nulls = pc.sum(pc.cast(missing, pa.int64())).as_py() or 0
        else:
            nulls = value.null_count
        if nulls:
            hint = (
                "only op='delete' rows may have a null value"
                if layout.changelog
                else "to write tombstones use changelog=True with op='delete'"
            )
            msg = (
                f"column 'value' is null in {nulls} row(s); every record needs a value ({hint}). "
                "Fill or filter null values. The epoch was aborted."
            )
            raise KafkaConnectorError(msg, column="value", code=StageCode.RECORD)
        if layout.topic and self._topic is None:
            topic = batch.column(batch.schema.get_field_index("topic"))
            if topic.null_count:
                msg = (
                    f"column 'topic' is null in {topic.null_count} row(s) and the sink has no "
                    "default topic; pass topic= to KafkaSink or fill the column. "
                    "The epoch was aborted."
                )
                raise KafkaConnectorError(msg, column="topic", code=StageCode.RECORD)

    # -- producing ----------------------------------------------------------------
    def write(self, batches: Iterable[pa.RecordBatch]) -> int:
        """Produce every row; return the number of rows produced so far."""
        for batch in batches:
            self._validate(batch)
            self._produce(batch)
        return self.rows

    def _column(self, batch: pa.RecordBatch, name: str) -> list[Any] | None:
        idx = batch.schema.get_field_index(name)
        return None if idx < 0 else batch.column(idx).to_pylist()

    def _payload(self, batch: pa.RecordBatch, name: str) -> list[Any] | None:
        """Key or value column as Python objects; strings as their UTF-8 bytes (step 2)."""
        idx = batch.schema.get_field_index(name)
        if idx < 0:
            return None
        column = batch.column(idx)
        if pa.types.is_string(column.type):
            column = column.view(pa.binary())
        elif pa.types.is_large_string(column.type):
            column = column.view(pa.large_binary())
        payload: list[Any] = column.to_pylist()
        return payload

    def _produce(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        values = self._payload(batch, "value")
        keys = self._payload(batch, "key") or [None] * n
        assert values is not None  # noqa: S101 - the driver checked the schema
        layout = self._layout
        if not (layout.topic or layout.partition or layout.headers):
            self._produce_simple(keys, values)
        else:
            self._produce_general(batch, keys, values)
        self.rows += n

    def _produce_simple(self, keys: list[Any], values: list[Any]) -> None:
        """Produce ``(key, value)`` rows with ``map`` over ``produce``; resume after a failure.

        ``map`` takes one item from each argument iterator before each call, so when
        ``produce`` raises for the row at ``i``, the value iterator has ``len - i - 1``
        items left. After a full queue the rest is produced from a slice (rare: a copy).
        """
        produce = self._producer.produce
        topic = self._topic
        assert topic is not None  # noqa: S101 - the driver requires a topic column otherwise
        start = 0
        while start < len(values):
            rest_values = values[start:] if start else values
            rest_keys = keys[start:] if start else keys
            values_it = iter(rest_values)
            try:
                collections.deque(map(produce, itertools.repeat(topic), values_it, rest_keys), 0)
                return
            except (BufferError, KafkaException) as exc:
                i = start + len(rest_values) - operator.length_hint(values_it) - 1
                self._retry_row(
                    exc, functools.partial(produce, topic, values[i], keys[i]), keys[i], values[i]
                )
            start = i + 1

    def _produce_general(self, batch: pa.RecordBatch, keys: list[Any], values: list[Any]) -> None:
        n = batch.num_rows
        topics = self._column(batch, "topic") or [None] * n
        parts = self._column(batch, "partition") or [None] * n
        headers = self._column(batch, "headers") or [None] * n
        produce = self._producer.produce
        default = self._topic
        for i in range(n):
            kwargs: dict[str, Any] = {"value": values[i], "key": keys[i]}
            if parts[i] is not None:
                kwargs["partition"] = parts[i]
            if headers[i]:
                kwargs["headers"] = _headers(headers[i])
            topic = str(topics[i] or default)
            try:
                produce(topic, **kwargs)
            except (BufferError, KafkaException) as exc:
                retry = functools.partial(produce, topic, **kwargs)
                self._retry_row(exc, retry, keys[i], values[i], topic, parts[i])

    def _retry_row(
        self,
        failure: BufferError | KafkaException,
        retry: Callable[[], None],
        key: object,
        value: object,
        topic: str | None = None,
        partition: int | None = None,
    ) -> None:
        """Produce a row whose ``produce`` raised ``failure`` with ``retry``, or raise its error.

        Delivery reports are served between attempts. It waits out back-pressure
        (``BufferError``), and the sink's topic unknown while a restarted broker reloads it
        (``_reloading``; at most ``BROKER_RESTART_WAIT_S``), the producer asking for the
        topic meanwhile so that a stale verdict lifts (``TopicRefresher``). A partition
        refused as unknown is asked for once and tried once more (a stale partition
        count). Any other Kafka error, first or on a retry (e.g. too large), is typed by
        ``_produce_error``.
        """
        if isinstance(failure, KafkaException) and code_of(failure) == UNKNOWN_PARTITION:
            refused = self._after_refresh(failure, retry, topic)
            if refused is None:
                return
            failure = refused
        if isinstance(failure, KafkaException) and not self._reloading(failure, topic):
            raise self._produce_error(failure, key, value, topic, partition) from failure
        if isinstance(failure, KafkaException):
            _log.warning(
                "produce: the producer refuses topic %r (%s); asking the brokers for it every "
                "%.0f s for at most %.0f s (a broker restarting, or a stale verdict)",
                self._topic,
                failure,
                STALE_REFRESH_S,
                BROKER_RESTART_WAIT_S,
            )
        deadline = time.monotonic() + BROKER_RESTART_WAIT_S
        while True:
            self._serve(lambda: self._producer.poll(BACKPRESSURE_POLL_S), "poll")
            try:
                retry()
            except BufferError:
                continue
            except KafkaException as exc:
                if self._reloading(exc, topic) and time.monotonic() < deadline:
                    self._refresher.refresh(self._topic or "")
                    continue
                raise self._produce_error(exc, key, value, topic, partition) from exc
            return

    def _after_refresh(
        self, failure: KafkaException, retry: Callable[[], None], topic: str | None
    ) -> BufferError | KafkaException | None:
        """Ask for ``topic`` once and try the row again; None if it went, else the error."""
        name = topic or self._topic
        if name is None or not stale_topic_verdict(failure):
            return failure
        TopicRefresher(self._producer).refresh(name)
        try:
            retry()
        except (BufferError, KafkaException) as exc:
            return exc
        return None

    def _reloading(self, exc: KafkaException, topic: str | None) -> bool:
        """Whether ``exc`` is the sink's own topic reported unknown (it existed at preflight)."""
        own = self._topic is not None and (topic is None or topic == self._topic)
        return own and code_of(exc) == UNKNOWN_TOPIC

    def _produce_error(
        self,
        exc: KafkaException,
        key: object,
        value: object,
        topic: str | None = None,
        partition: int | None = None,
    ) -> Exception:
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            return _too_large(err, key, value)
        if self._reloading(exc, topic):
            msg = (
                f"produce: the sink's topic {self._topic!r} stayed unknown to the broker for "
                f"{BROKER_RESTART_WAIT_S:.0f} s ({err}); it existed when the sink started: "
                "was it deleted? Recreate it; the epoch was aborted."
            )
            return KafkaConnectorError(
                msg, action=ErrorAction.ABORT, kafka_code=UNKNOWN_TOPIC, code=KafkaCode.WRITE
            )
        if err is not None and err.code() in (UNKNOWN_TOPIC, UNKNOWN_PARTITION):
            column = "partition" if err.code() == UNKNOWN_PARTITION else "topic"
            msg = (
                f"cannot produce to topic {topic or self._topic!r} partition {partition}: "
                f"{err.str()}; fix column {column!r} (or create the topic). The epoch was aborted."
            )
            return KafkaConnectorError(msg, column=column, code=StageCode.RECORD)
        return to_write_error(exc, "produce")

    def _serve(self, call: Callable[[], int], what: str) -> int:
        """Run ``poll``/``flush``; a Kafka error raised while serving callbacks is typed.

        A fatal error (a fenced transactional producer) can surface as a KafkaException
        while librdkafka serves delivery reports; confluent-kafka then reports the next
        callback as a SystemError whose cause is that KafkaException. When that next
        callback is a log line (the kit routes librdkafka's logs to Python), the
        SystemError carries no cause at all: the producer's state is then unknown, and it
        is treated as fatal (dropped, never called again; a retry creates a new one).
        """
        try:
            return call()
        except KafkaException as exc:
            raise to_write_error(exc, what) from exc
        except SystemError as exc:
            cause = exc.__cause__
            if not isinstance(cause, KafkaException):
                cause = KafkaException(
                    KafkaError(
                        FATAL, f"librdkafka failed while serving callbacks: {exc}", fatal=True
                    )
                )
            raise to_write_error(cause, what) from exc

    def flush(self, timeout_s: float) -> None:
        """Wait for every produced record to be acknowledged; raise the first failure."""
        deadline = time.monotonic() + timeout_s
        flush = self._producer.flush
        remaining = self._serve(functools.partial(flush, timeout_s), "flush")
        while remaining and time.monotonic() < deadline:
            wait = max(0.1, deadline - time.monotonic())
            remaining = self._serve(functools.partial(flush, wait), "flush")
        self.raise_delivery_error()
        if remaining:
            err = KafkaException(KafkaError(TIMED_OUT, f"{remaining} records unsent"))
            raise to_write_error(
                err, f"flush ({remaining} records still queued after {timeout_s}s)"
            )

    def raise_delivery_error(self) -> None:
        """Raise the first delivery failure seen so far, typed."""
        if self._errors.first is None:
            return
        err, msg = self._errors.first
        if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            raise _too_large(err, msg.key(), msg.value())
        raise to_write_error(KafkaException(err), f"delivery of {self._errors.count} record(s)")
