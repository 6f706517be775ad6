"""The Spark Python data source ``kafka-rc``: streaming and batch readers.

Streaming micro-batch protocol (Spark calls these on the driver, in this order):
    1. ``initialOffset()`` once for a new query: resolve ``startingOffsets`` against the
       partitions that exist now (default: latest = last stable offset).
    2. ``latestOffset(start, limit)`` per trigger: discover partitions (new ones start at
       offset 0), fetch each partition's last stable offset, hold the batch back while
       fewer than ``minOffsetsPerTrigger`` offsets are new (``_trigger``), and cap the
       total with ``maxOffsetsPerTrigger``; Spark checkpoints the result. The
       result never lacks a partition of ``start`` nor moves one backwards unless the
       cluster confirmed it (``ClusterView.settled_latest``); that is data loss, raised
       here under ``failOnDataLoss`` before Spark checkpoints anything.
    3. ``partitions(start, end)``: plan one range per partition, apply ``failOnDataLoss``
       for deleted offsets, split by ``maxRecordsPerPartition`` and ``minPartitions``;
       tasks run ``read()`` on executors.
    4. ``commit(end)`` after the batch's sink has committed: optionally store ``end`` in
       the ``commitOffsetsToGroup`` consumer group, for lag monitoring only.

A restarted query skips step 1 and replays from Spark's checkpointed offsets, so the
checkpoint, not the consumer group, is the source of truth. Offsets that release 0.1.0
checkpointed during a broker outage may lack partitions; ``ReadPosition`` reads them as
"no information" (docs/kafka-source.md, "Broker outages and restarts").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from connectors._worker_heap import freeze_worker_heap
from connectors.kafka._errors import KafkaCode, KafkaConnectorError

from ._arrow import spark_schema
from ._bounds import OffsetBound
from ._cluster import ClusterView
from ._fetch import read_range
from ._offsets import EARLIEST, LATEST, KafkaOffsets, TopicPartitionKey
from ._options import SourceOptions
from ._position import ReadPosition, merge_max
from ._ranges import (
    OffsetRange,
    lost_offsets,
    plan_ranges,
    rate_limit,
    report_data_loss,
    split_ranges,
)
from ._spark_api import SOURCE_NAME
from ._trigger import MinOffsetsGate

Offsets = dict[TopicPartitionKey, int]


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """The Spark input partition of one task: an offset range plus read settings."""

    offset_range: OffsetRange


class KafkaRcDataSource(DataSource):
    """Kafka source reading with ``isolation.level=read_committed`` (never aborted data).

    Construction validates the options (no network I/O) and raises
    :class:`connectors.kafka.KafkaCode.SOURCE_OPTION` on bad input.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(dict(options))
        self.source_options = SourceOptions.from_options(options)

    @classmethod
    def name(cls) -> str:
        """Return the format name, ``kafka-rc``."""
        return SOURCE_NAME

    def schema(self) -> StructType:
        """Spark's Kafka source schema (plus ``headers`` when ``includeHeaders=true``)."""
        return spark_schema(self.source_options.include_headers)

    def reader(self, schema: StructType) -> KafkaBatchReader:
        """Batch reader for ``spark.read``; validates batch-only option rules."""
        self._check_schema(schema)
        self.source_options.batch_bounds()
        return KafkaBatchReader(self.source_options)

    def streamReader(self, schema: StructType) -> KafkaStreamReader:  # noqa: N802 - Spark API
        """Micro-batch reader for ``spark.readStream``; validates stream-only option rules."""
        self._check_schema(schema)
        self.source_options.stream_starting()
        return KafkaStreamReader(self.source_options)

    def _check_schema(self, schema: StructType) -> None:
        expected = self.schema()
        if schema != expected:
            msg = (
                f"kafka-rc has a fixed schema and does not accept a user schema; expected "
                f"{expected.simpleString()}, got {schema.simpleString()}. Cast columns instead."
            )
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; see the module docstring for the call protocol.

    Picklable: Spark ships ``read`` (and so this object) to executors; the AdminClient is
    created lazily on the driver and never pickled.
    """

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._cluster = ClusterView(options)
        self._latest: Offsets | None = None
        self._available_now_cap: Offsets | None = None
        self._position = ReadPosition()
        low = options.min_offsets_per_trigger
        self._gate = None if low is None else MinOffsetsGate(low, options.max_trigger_delay_ms)

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark API
        """Resolve ``startingOffsets`` now (for a query without a checkpoint)."""
        bound = self._options.stream_starting()
        partitions = self._cluster.discover(bound.offsets.partitions())
        offsets = resolve_bound(self._cluster, bound, partitions, "startingOffsets")
        return KafkaOffsets.from_mapping(offsets).to_json_dict()

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark API
        """``ReadMaxRows(maxOffsetsPerTrigger)``, else ``ReadMinRows(minOffsetsPerTrigger)``.

        Python's read limits have no composite: with both options the reader applies the
        minimum from its options whenever Spark's limit is not ``ReadAllAvailable``.
        """
        high, low = self._options.max_offsets_per_trigger, self._options.min_offsets_per_trigger
        if high is not None:
            return ReadMaxRows(high)
        return ReadAllAvailable() if low is None else ReadMinRows(low)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        """End offsets of the next micro-batch: last stable offsets, capped by ``limit``.

        Never lacks a partition of ``start`` nor goes below it, and under
        ``Trigger.AvailableNow`` never below the target frozen at the start, unless the
        cluster confirmed the loss (then :class:`KafkaCode.DATA_LOSS` under ``failOnDataLoss``).
        """
        given = _parse_offsets(start)
        begin = self._position.begin(given)
        cap = self._available_now_cap
        latest = self._cluster.settled_latest(merge_max(begin, cap or {}))
        self._check_lost(begin, latest)
        if cap is not None:
            latest = _cap(latest, cap, begin)
        self._latest = latest
        if self._waits_for_more(limit, begin, latest):
            return KafkaOffsets.from_mapping(given).to_json_dict()  # no batch this trigger
        end = latest
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, latest, limit.max_rows)
        # A start that lacked partitions: this batch first records where they stood.
        end = {**end, **{tp: o for tp, o in begin.items() if tp not in given and tp in end}}
        self._position.seen(end)
        return KafkaOffsets.from_mapping(end).to_json_dict()

    def _waits_for_more(self, limit: ReadLimit, begin: Offsets, latest: Offsets) -> bool:
        """``minOffsetsPerTrigger`` holds this trigger back (never under AvailableNow/Once)."""
        if self._gate is None or self._available_now_cap is not None:
            return False
        return not isinstance(limit, ReadAllAvailable) and self._gate.holds(begin, latest)

    def _check_lost(self, begin: Offsets, latest: Offsets) -> None:
        lost = lost_offsets(begin, latest)
        for message in lost.values():
            report_data_loss(message, self._options.fail_on_data_loss)
        self._position.forget(tp for tp in lost if tp not in latest)

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802 - Spark API
        """Return the last stable offsets seen by the latest ``latestOffset`` call."""
        if self._latest is None:
            return None
        return KafkaOffsets.from_mapping(self._latest).to_json_dict()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark API
        """Freeze the target: never read past the last stable offsets of this moment."""
        self._available_now_cap = self._cluster.settled_latest(self._position.carried)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One task per partition range (more with ``minPartitions``).

        A partition of ``start`` that ``end`` lacks (and the reader did not see confirmed
        gone) is read as "no information": nothing of it is read in this batch.
        """
        begin = self._position.begin(_parse_offsets(start))
        stop = self._position.carry(begin, _parse_offsets(end))
        return _plan(self._options, self._cluster, begin, stop)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range on an executor (Arrow batches)."""
        return _read(self._options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """After Spark committed a batch: optionally mirror ``end`` into a consumer group."""
        group = self._options.commit_offsets_to_group
        if group is not None:
            self._cluster.commit_group_offsets(group, _parse_offsets(end))


class KafkaBatchReader(DataSourceReader):
    """Batch reader: ``[startingOffsets, endingOffsets)`` resolved when Spark plans."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._cluster = ClusterView(options)

    def partitions(self) -> Sequence[InputPartition]:
        """Resolve both bounds against the cluster and plan ranges.

        Raises:
            KafkaCode.OFFSET_SPEC: offsets JSON does not match the partitions, an ending offset
                lies beyond the last stable offset, or a start lies past its end.

        """
        start_bound, end_bound = self._options.batch_bounds()
        named = start_bound.offsets.partitions() | end_bound.offsets.partitions()
        parts = self._cluster.discover(named)
        start = resolve_bound(self._cluster, start_bound, parts, "startingOffsets")
        end = resolve_bound(self._cluster, end_bound, parts, "endingOffsets")
        if end_bound.kind == "specific":
            _check_not_beyond_latest(end, self._cluster.latest(parts))
        backwards = sorted(tp for tp in end if start[tp] > end[tp])
        if backwards:
            detail = ", ".join(f"{t}-{p}: {start[(t, p)]} > {end[(t, p)]}" for t, p in backwards)
            msg = f"startingOffsets lie after endingOffsets for {detail}"
            raise KafkaConnectorError(msg, code=KafkaCode.OFFSET_SPEC)
        return _plan(self._options, self._cluster, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range on an executor (Arrow batches)."""
        return _read(self._options, partition)


def resolve_bound(
    cluster: ClusterView, bound: OffsetBound, partitions: list[TopicPartitionKey], option: str
) -> Offsets:
    """Concrete offsets of ``bound`` for exactly ``partitions``.

    Raises:
        KafkaCode.OFFSET_SPEC: specific offsets name partitions that do not exist, or leave out
            partitions that do (like Spark, every partition must be given).

    """
    if bound.kind == "earliest":
        return cluster.earliest(partitions)
    if bound.kind == "latest":
        return cluster.latest(partitions)
    if bound.kind == "timestamp":
        return _resolve_times(cluster, bound, partitions)
    given = _every_partition(bound, partitions, bound.option or option)
    lows = cluster.earliest(tp for tp, o in given.items() if o == EARLIEST)
    highs = cluster.latest(tp for tp, o in given.items() if o == LATEST)
    return {**given, **lows, **highs}


def _every_partition(
    bound: OffsetBound, partitions: list[TopicPartitionKey], option: str
) -> dict[TopicPartitionKey, int]:
    """Return the bound's per-partition values; they must name exactly ``partitions``."""
    given = bound.offsets.as_dict()
    missing, unknown = sorted(set(partitions) - set(given)), sorted(set(given) - set(partitions))
    if missing or unknown:
        msg = (
            f"{option} must give a value for every partition of the subscription: "
            f"missing {missing}, not found in the cluster {unknown}"
        )
        raise KafkaConnectorError(msg, code=KafkaCode.OFFSET_SPEC)
    return given


def _resolve_times(
    cluster: ClusterView, bound: OffsetBound, partitions: list[TopicPartitionKey]
) -> Offsets:
    """Return a timestamp bound's offsets (``_bounds``); a match at or past latest is none.

    Raises:
        KafkaCode.OFFSET_SPEC: a starting bound with ``startingOffsetsByTimestampStrategy=error``
            and a partition without a record at or after its timestamp.

    """
    if bound.timestamp is not None:
        times = dict.fromkeys(partitions, bound.timestamp)
    else:
        times = _every_partition(bound, partitions, bound.option)
    found, latest = cluster.offsets_for_times(times), cluster.latest(times)
    unmatched = sorted(tp for tp, o in found.items() if o is None or o >= latest[tp])
    if unmatched and bound.no_match == "error":
        detail = ", ".join(f"{t}-{p} (timestamp {times[(t, p)]})" for t, p in unmatched)
        msg = (
            f"{bound.option}: no record at or after the timestamp in {detail}. Choose an "
            "earlier timestamp, or set startingOffsetsByTimestampStrategy=latest to start "
            "those partitions at their latest offset"
        )
        raise KafkaConnectorError(msg, code=KafkaCode.OFFSET_SPEC)
    return {tp: latest[tp] if tp in unmatched else int(found[tp] or 0) for tp in times}


def _check_not_beyond_latest(end: Offsets, latest: Offsets) -> None:
    beyond = sorted(tp for tp, o in end.items() if o > latest.get(tp, 0))
    if beyond:
        detail = ", ".join(f"{t}-{p}: {end[(t, p)]} > {latest.get((t, p), 0)}" for t, p in beyond)
        msg = (
            f"endingOffsets lie beyond the last stable offset ({detail}); a read_committed "
            "reader cannot read there yet (an open transaction or no such data)"
        )
        raise KafkaConnectorError(msg, code=KafkaCode.OFFSET_SPEC)


def _cap(latest: Offsets, cap: Offsets, begin: Offsets) -> Offsets:
    """Limit ``latest`` to the Trigger.AvailableNow target frozen earlier."""
    capped: Offsets = {}
    for tp, offset in latest.items():
        if tp in cap:
            capped[tp] = min(offset, max(cap[tp], begin.get(tp, 0)))
        elif tp in begin:
            capped[tp] = begin[tp]
    return capped


def _plan(
    options: SourceOptions, cluster: ClusterView, start: Offsets, end: Offsets
) -> list[InputPartition]:
    need = [tp for tp, hi in end.items() if hi > start.get(tp, 0)]
    earliest = cluster.earliest(need)
    ranges = plan_ranges(start, end, earliest, fail_on_data_loss=options.fail_on_data_loss)
    pieces = split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    return [KafkaInputPartition(r) for r in pieces]


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    freeze_worker_heap()
    # Spark substitutes a placeholder InputPartition(None) when a batch plan has no ranges.
    if not isinstance(partition, KafkaInputPartition):
        return iter(())
    return read_range(options, partition.offset_range)


def _parse_offsets(obj: Any) -> Offsets:
    return KafkaOffsets.from_json_dict(obj, option="checkpointed offset").as_dict()
