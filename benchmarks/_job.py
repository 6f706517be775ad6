"""The streaming job of the sink benchmarks and the sinks (variants) it is written with.

The job: Spark's ``rate-micro-batch`` source with ``INPUT_PARTITIONS`` partitions and a
fixed row count per micro-batch, ``key = CAST(value AS STRING)`` and ``value = to_json``
of the row (about 45 bytes), handed to ``foreachBatch``. Every micro-batch is written by
every variant in turn (the order rotates with the batch id, so no variant always runs
first or last); each variant's write of one micro-batch is one timed epoch. The rate
source computes a batch from its offsets alone, so every variant writes the same rows
and pays the same source and ``to_json`` work.

Variants:

* ``eos-aligned`` / ``eos-unaligned`` / ``alo-sink``: ``KafkaSink`` exactly-once
  (aligned or unaligned commit) and at-least-once, ``WRITE_TASKS`` write partitions;
* ``baseline``: what users hand-write today: ``df.foreachPartition`` with a plain
  idempotent confluent-kafka producer over ``Row`` objects (at-least-once), the sink's
  producer batching settings;
* ``noop``: Spark's ``noop`` writer, the ceiling of the job without Kafka;
* ``rows-drop``: ``foreachPartition`` that only iterates the ``Row`` objects (the cost
  of shipping rows to Python, without Kafka);
* ``arrow-drop``: ``df.mapInArrow(drop, df.schema)`` into the ``noop`` writer, ``drop``
  reading every Arrow batch in the Python worker and returning none: the same
  ``mapInArrow`` path the sink's write stage uses, so what any Python sink on Spark pays
  before it talks to Kafka (the ceiling of the issue-23 targets);
* ``arrow-produce``: ``arrow-drop`` whose tasks also produce every row to Kafka where it
  is (no shuffle, no transaction), with a pooled idempotent producer and the sink's
  produce loop: the bound a Python Kafka writer on Spark can reach on this machine.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark import cloudpickle

from benchmarks import _cpu
from connectors.kafka._sink._config import DEFAULT_PRODUCER_CONFIG
from connectors.stage._options import DEFAULT_VOTE_CHANNEL

# The partition functions below travel to the Spark workers by value, like user code.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

VARIANTS = (
    "eos-aligned",
    "eos-unaligned",
    "alo-sink",
    "baseline",
    "noop",
    "rows-drop",
    "arrow-drop",
    "arrow-produce",
)
REFERENCE_VARIANTS = ("eos-aligned-ref", "eos-unaligned-ref")
OPTIONAL_VARIANTS = ("eos-keep", *REFERENCE_VARIANTS)
"""Run only when named in ``--variants``: ``eos-keep`` is exactly-once unaligned with
``keep_partitioning=True`` (no routing exchange: one write task per input partition, each
writing every Kafka partition), what the sink costs without the exchange;
``eos-aligned-ref`` and ``eos-unaligned-ref`` are the exactly-once modes with
``producer_strategy="reference"`` (a new producer per write task), what the pooled
strategy saves."""
ALL_VARIANTS = (*VARIANTS, *OPTIONAL_VARIANTS)
SINK_VARIANTS = ("eos-aligned", "eos-unaligned", "alo-sink", "eos-keep", *REFERENCE_VARIANTS)
KAFKA_VARIANTS = (*SINK_VARIANTS, "baseline", "arrow-produce")
INPUT_PARTITIONS = 4
OUTPUT_PARTITIONS = 4
WRITE_TASKS = 2
# The hand-written sink: an idempotent producer with the sink's batching settings.
BASELINE_SETTINGS = {**DEFAULT_PRODUCER_CONFIG, "enable.idempotence": "true"}
# Seconds for topic creation and watermark queries.
ADMIN_TIMEOUT_S = 30.0
# Seconds between checks that the streaming query is still alive while waiting for it.
QUERY_POLL_S = 0.5


def add_variants_option(parser: argparse.ArgumentParser) -> None:
    """The ``--variants`` option of the job benchmarks (default: every variant but the optional)."""
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated subset of: {', '.join(VARIANTS)}; on request: "
        + ", ".join(OPTIONAL_VARIANTS),
    )


def variant_list(parser: argparse.ArgumentParser, variants: str) -> list[str]:
    """The variants ``--variants`` names, in its order; an unknown one is a parser error."""
    names = [v.strip() for v in variants.split(",") if v.strip()]
    unknown = set(names) - set(ALL_VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(ALL_VARIANTS)}")
    return names


@dataclass(frozen=True)
class EpochTime:
    """One variant's write of one micro-batch: duration and wall-clock window."""

    rows: int
    variant: str
    batch_id: int
    position: int  # place of the variant in this batch's order
    seconds: float
    start: float  # time.time() at the start (request windows)
    end: float
    cpu_s: float = float("nan")  # CPU seconds of driver, JVM and Python workers (_cpu)
    broker_cpu_s: float = float("nan")  # CPU seconds of a minikafka broker of this run


def source_frame(spark: Any, rows: int, *, pad: int = 0) -> Any:
    """Return the job's streaming DataFrame (``key``, ``value``); ``pad`` extra value bytes."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias

    raw = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("numPartitions", INPUT_PARTITIONS)
        .load()
    )
    fields = [F.col("value").alias("id"), F.col("timestamp").alias("ts")]
    if pad:
        fields.append(F.lit("x" * pad).alias("pad"))
    return raw.select(
        F.col("value").cast("string").alias("key"), F.to_json(F.struct(*fields)).alias("value")
    )


def _baseline(bootstrap: str, topic: str) -> Callable[[Any, int], None]:
    settings = {**BASELINE_SETTINGS, "bootstrap.servers": bootstrap, "client.id": "baseline"}

    def write_partition(rows: Iterator[Any]) -> None:
        from confluent_kafka import Producer  # in the worker: librdkafka is not fork-safe

        producer = Producer(settings)
        for row in rows:
            while True:
                try:
                    producer.produce(topic, key=row.key, value=row.value)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        if producer.flush(300.0):  # seconds; a literal so the closure ships no globals
            msg = "baseline producer did not flush"
            raise RuntimeError(msg)

    def write(df: Any, _batch_id: int) -> None:
        df.foreachPartition(write_partition)

    return write


def _drop_rows(rows: Iterator[Any]) -> None:
    for _ in rows:
        pass


def drop_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` function that reads every batch and returns none."""
    for _ in batches:
        pass
    yield from ()


def _arrow_drop(df: Any, _batch_id: int) -> None:
    df.mapInArrow(drop_batches, df.schema).write.format("noop").mode("overwrite").save()


def _arrow_produce(bootstrap: str, topic: str) -> Callable[[Any, int], None]:
    """The fastest Kafka write from Spark's Arrow path: the bound any Python sink can reach.

    ``arrow-drop`` plus producing every row: each input partition's task produces its rows
    where they are (no routing shuffle, no transaction, no marker, no checksum) with an
    idempotent producer kept in its Python worker across tasks (as the sink pools its
    producers), from the key and value columns' UTF-8 bytes with one ``produce`` call per
    row driven by ``map`` (the sink's own loop), then flushes. What it adds to
    ``arrow-drop`` is what producing the rows costs on this machine; the sink cannot be
    faster than it.
    """
    settings = {**BASELINE_SETTINGS, "bootstrap.servers": bootstrap, "client.id": "arrow-produce"}

    def produce_batches(batches: Iterator[Any]) -> Iterator[Any]:
        import collections
        import itertools
        import sys
        import types

        import pyarrow as pa
        from confluent_kafka import Producer  # in the worker: librdkafka is not fork-safe

        # One producer per worker process and topic, kept across tasks in a module of its own
        # (this function's globals are rebuilt for every task).
        pool = sys.modules.setdefault(
            "_bench_arrow_produce", types.ModuleType("_bench_arrow_produce")
        )
        producers: dict[str, Any] = pool.__dict__.setdefault("producers", {})
        producer = producers.get(topic) or producers.setdefault(topic, Producer(settings))
        for batch in batches:
            keys = batch.column(0).view(pa.binary()).to_pylist()
            values = batch.column(1).view(pa.binary()).to_pylist()
            start = 0
            while start < len(values):
                rest = iter(values[start:])
                try:
                    collections.deque(
                        map(producer.produce, itertools.repeat(topic), rest, keys[start:]), 0
                    )
                    break
                except BufferError:  # queue full: serve deliveries, then go on from that row
                    start = len(values) - len(list(rest)) - 1
                    producer.poll(0.05)
            producer.poll(0)
        if producer.flush(300.0):  # seconds; a literal so the closure ships no globals
            msg = "arrow-produce producer did not flush"
            raise RuntimeError(msg)
        yield from ()

    def write(df: Any, _batch_id: int) -> None:
        df.mapInArrow(produce_batches, df.schema).write.format("noop").mode("overwrite").save()

    return write


def _noop(df: Any, _batch_id: int) -> None:
    df.write.format("noop").mode("overwrite").save()


def _rows_drop(df: Any, _batch_id: int) -> None:
    df.foreachPartition(_drop_rows)


class Writers:
    """One writer per variant, each with its own output topic (and sink id)."""

    def __init__(
        self,
        bootstrap: str,
        variants: Sequence[str],
        *,
        vote_channel: str = DEFAULT_VOTE_CHANNEL,
        partitions: int = OUTPUT_PARTITIONS,
    ) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions  # of every output topic
        self.topics: dict[str, str] = {}
        self._sinks: list[Any] = []
        self._write: dict[str, Callable[[Any, int], Any]] = {}
        self._run = uuid.uuid4().hex[:8]
        self._admin: Any = AdminClient({"bootstrap.servers": bootstrap})
        for variant in variants:
            if variant in SINK_VARIANTS:
                unaligned = variant in ("eos-unaligned", "eos-keep", "eos-unaligned-ref")
                self.add_sink(
                    variant,
                    guarantee="at-least-once" if variant == "alo-sink" else "exactly-once",
                    mode="unaligned" if unaligned else "aligned",
                    vote_channel=vote_channel,
                    keep_partitioning=variant == "eos-keep",
                    producer_strategy="reference" if variant in REFERENCE_VARIANTS else "pooled",
                )
            elif variant == "baseline":
                self._write[variant] = _baseline(bootstrap, self._new_topic(variant))
            elif variant == "noop":
                self._write[variant] = _noop
            elif variant == "rows-drop":
                self._write[variant] = _rows_drop
            elif variant == "arrow-drop":
                self._write[variant] = _arrow_drop
            elif variant == "arrow-produce":
                self._write[variant] = _arrow_produce(bootstrap, self._new_topic(variant))
            else:
                msg = f"unknown variant {variant!r}; choose from {', '.join(ALL_VARIANTS)}"
                raise ValueError(msg)

    def _new_topic(self, variant: str) -> str:
        topic = f"bench-{variant}-{self._run}"
        self._admin.create_topics([NewTopic(topic, self.partitions, -1)])[topic].result(
            timeout=ADMIN_TIMEOUT_S
        )
        self.topics[variant] = topic
        return topic

    def add_sink(
        self,
        name: str,
        *,
        guarantee: str,
        mode: str,
        vote_channel: str = DEFAULT_VOTE_CHANNEL,
        parallelism: int = WRITE_TASKS,
        keep_partitioning: bool = False,
        producer_strategy: str = "pooled",
    ) -> Any:
        """Add a KafkaSink variant ``name`` with its own topic and sink id; return the sink.

        With ``keep_partitioning`` the sink writes the input's partitions (``parallelism``
        is then not given: one write task per input partition).
        """
        from connectors.kafka import KafkaSink

        topic = self._new_topic(name)
        sink = KafkaSink(
            self.bootstrap,
            topic,
            f"{topic}-sink",
            guarantee=guarantee,
            mode=mode,
            parallelism=None if keep_partitioning else parallelism,
            keep_partitioning=keep_partitioning,
            vote_channel=vote_channel,
            producer_strategy=producer_strategy,
        )
        self._sinks.append(sink)
        self._write[name] = sink
        return sink

    def write(self, variant: str, df: Any, batch_id: int) -> None:
        """Write micro-batch ``batch_id`` with ``variant``."""
        self._write[variant](df, batch_id)

    def records_written(self) -> dict[str, int]:
        """Sum of the high watermarks of each Kafka variant's topic (records + txn markers)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-watermarks"})
        try:
            return {
                v: sum(
                    consumer.get_watermark_offsets(TopicPartition(t, p), timeout=ADMIN_TIMEOUT_S)[1]
                    for p in range(self.partitions)
                )
                for v, t in self.topics.items()
            }
        finally:
            consumer.close()

    def close(self) -> None:
        """Close the sinks (epoch logs, vote servers) and drop every client of this object."""
        for sink in self._sinks:
            sink.close()
        self._sinks, self._write = [], {}
        self._admin = None
        gc.collect()  # release librdkafka handles now, while the broker still runs


def rotated(variants: Sequence[str], batch_id: int) -> list[str]:
    """The variants' order for ``batch_id``: rotated by one position per batch."""
    k = batch_id % len(variants)
    return [*variants[k:], *variants[:k]]


class VariantWriters(Protocol):
    """Writes one micro-batch with a named variant (:class:`Writers`, or another benchmark's)."""

    def write(self, variant: str, df: Any, batch_id: int) -> None:
        """Write micro-batch ``batch_id`` with ``variant``."""


def table_frame(spark: Any, rows: int) -> Any:
    """The job's streaming DataFrame of table rows: ``rows`` per micro-batch.

    Columns ``(id bigint, name string, amount double, ts timestamp)``: the job of the table
    benchmarks (PostgreSQL, Delta Lake, Iceberg).
    """
    from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias

    raw = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("numPartitions", INPUT_PARTITIONS)
        .load()
    )
    return raw.select(
        F.col("value").alias("id"),
        F.concat(F.lit("name-"), F.col("value").cast("string")).alias("name"),
        (F.col("value") * F.lit(0.001)).alias("amount"),
        F.col("timestamp").alias("ts"),
    )


def run_interleaved(
    spark: Any,
    writers: VariantWriters,
    variants: Sequence[str],
    rows: int,
    batches: int,
    *,
    pad: int = 0,
    on_epoch: Callable[[EpochTime], None] | None = None,
    frame: Any = None,
) -> list[EpochTime]:
    """Run the job for ``batches`` micro-batches; every variant writes every batch.

    ``frame``: the streaming DataFrame to write (default: :func:`source_frame` of ``rows``).
    """
    times: list[EpochTime] = []

    def each(df: Any, batch_id: int) -> None:
        if batch_id >= batches:
            return
        for position, variant in enumerate(rotated(variants, batch_id)):
            cpu_before = _cpu.snapshot()
            start, t0 = time.time(), time.perf_counter()
            writers.write(variant, df, batch_id)
            seconds = time.perf_counter() - t0
            end = time.time()
            cpu = _cpu.used(cpu_before, _cpu.snapshot()) if cpu_before else {}
            epoch = EpochTime(
                rows,
                variant,
                batch_id,
                position,
                seconds,
                start,
                end,
                cpu.get("spark", float("nan")),
                cpu.get("broker", float("nan")),
            )
            times.append(epoch)
            if on_epoch is not None:
                on_epoch(epoch)

    run_stream(spark, source_frame(spark, rows, pad=pad) if frame is None else frame, each, batches)
    return times


def run_stream(spark: Any, df: Any, each: Callable[[Any, int], None], batches: int) -> None:
    """Run ``df.writeStream.foreachBatch(each)`` until batch ``batches - 1`` has returned."""
    done = threading.Event()
    checkpoint = tempfile.mkdtemp(prefix="bench-sink-ck-")

    def guarded(batch_df: Any, batch_id: int) -> None:
        each(batch_df, batch_id)
        if batch_id >= batches - 1:
            done.set()

    query = df.writeStream.foreachBatch(guarded).option("checkpointLocation", checkpoint).start()
    try:
        while not done.wait(QUERY_POLL_S):
            if not query.isActive:
                msg = f"the benchmark query stopped: {query.exception()}"
                raise RuntimeError(msg)
    finally:
        query.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)


def paired(
    times: Sequence[EpochTime], variant: str, other: str, how: str, field: str = "seconds"
) -> float | None:
    """Median over the batches both wrote of ``variant`` vs ``other``: a ratio or a difference.

    ``how="ratio"``: ``other``'s value over ``variant``'s (a throughput ratio for times);
    ``how="diff"``: ``variant``'s minus ``other``'s, in milliseconds. None if no batch pairs.
    """
    mine = {t.batch_id: getattr(t, field) for t in times if t.variant == variant}
    theirs = {t.batch_id: getattr(t, field) for t in times if t.variant == other}
    common = sorted(b for b in set(mine) & set(theirs) if mine[b] > 0 and theirs[b] > 0)
    if not common:
        return None
    if how == "ratio":  # throughput ratio: their time over mine
        return statistics.median(theirs[b] / mine[b] for b in common)
    return statistics.median(1000.0 * (mine[b] - theirs[b]) for b in common)
