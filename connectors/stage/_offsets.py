"""The input offsets of a micro-batch, read on the driver without a Spark job.

Spark plans a micro-batch's offsets (and writes them to the checkpoint's offset log)
before it calls ``foreachBatch``; the batch's incremental execution holds them in its
logical plan, one streaming scan relation per source with ``startOffset`` / ``endOffset``.
:func:`batch_input` reads them through the query's stream execution (py4j, a few
milliseconds; measured in ``benchmarks.bench_sink``), so the epoch's plan can carry them
(docs/architecture.md, section 11). Why not the alternatives: ``lastProgress`` describes
the previous batch, not this one; the rows' ``offset`` column is gone after an
aggregation or a projection, and its maximum misses trailing transaction markers and
filtered records.

The plan shapes, read from real runs of each Spark line (README, "Supported Spark
versions"): a v2 streaming source is a ``StreamingDataSourceV2Relation`` leaf on 3.5
(``stream()``, ``startOffset()``, ``endOffset()``, no ``relation()``) and a
``StreamingDataSourceV2ScanRelation`` leaf from 4.0 on (the same, and ``relation()``,
whose ``table().name()`` is the source's name: ``kafka-rc`` for the kit's source); a
file or other v1 source is a leaf of another class. A source is Kafka when its stream is
one of Spark's ``kafka`` classes (package ``org.apache.spark.sql.kafka010``, every line)
or its table is a Kafka table (:data:`KAFKA_TABLES`); any other streaming source is
counted in ``InputOffsets.other_sources``, with one debug line. Nothing here raises: a
leaf Spark's internals answer differently for is another source, and when the execution
itself cannot be read (outside a streaming query, under Spark Connect without a py4j
gateway, an unknown Spark) the result is None: nothing recorded, and resuming from the
output is then refused, saying why. Neither case logs a stack trace.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from txn import InputOffsets
from txn._offsets import TopicPartition, parse_offsets_json

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_log = logging.getLogger("connectors.stage.offsets")

# Table names of the Kafka sources' v2 relations: the kit's source, Spark's own.
KAFKA_TABLES = frozenset({"kafka-rc", "KafkaTable"})
# Package of Spark's own Kafka source classes (spark-sql-kafka-0-10).
SPARK_KAFKA_PACKAGE = "org.apache.spark.sql.kafka010."
# The v2 streaming leaf of each plan shape, and whether it has ``relation()`` (module docstring).
V2_LEAVES = {
    "StreamingDataSourceV2Relation": False,  # Spark 3.5
    "StreamingDataSourceV2ScanRelation": True,  # Spark 4.0 and later
}

Span = tuple[dict[TopicPartition, int], dict[TopicPartition, int]]


def batch_input(df: DataFrame, query_id: str | None, batch_id: int) -> InputOffsets | None:
    """Return the input offsets of ``batch_id`` of query ``query_id`` (module docstring)."""
    if query_id is None:
        return None
    try:
        execution = _incremental_execution(df, query_id)
        if execution is None or int(execution.currentBatchId()) != batch_id:
            return None
        plan = execution.logical()
    except Exception as exc:  # noqa: BLE001 - py4j errors of another Spark's internals
        _log.debug(
            "input offsets of batch %d not readable (%s); not recorded", batch_id, _brief(exc)
        )
        return None
    return _from_plan(plan)


def _incremental_execution(df: DataFrame, query_id: str) -> Any:
    session = df.sparkSession
    context = getattr(session, "_sc", None)
    jvm = getattr(context, "_jvm", None)
    if jvm is None:  # Spark Connect: no gateway
        return None
    # The batch's session is a clone with a query manager of its own; the shared state
    # holds every active query (as in ``_lifecycle.RunningQuery``).
    shared = session._jsparkSession.sharedState()  # noqa: SLF001
    stream = shared.activeStreamingQueries().get(jvm.java.util.UUID.fromString(query_id))
    return None if stream is None else stream.lastExecution()


def _from_plan(plan: Any) -> InputOffsets | None:
    """Return the Kafka spans of ``plan``'s streaming leaves; None if they cannot be listed."""
    try:
        leaves = _streaming_leaves(plan)
    except Exception as exc:  # noqa: BLE001 - py4j errors of another Spark's internals
        _log.debug("streaming sources of the batch not readable (%s); not recorded", _brief(exc))
        return None
    starts: dict[TopicPartition, int] = {}
    ends: dict[TopicPartition, int] = {}
    other = 0
    seen: set[str] = set()
    for leaf in leaves:
        found = _leaf_span(leaf, seen)
        if found is _SAME_SOURCE:
            continue
        if found is None or _overlaps(found[1], ends):
            other += 1
            continue
        starts.update(found[0])
        ends.update(found[1])
    return InputOffsets.of(starts, ends, other)


# ``_leaf_span``'s answer for a source already counted (the same source read twice).
_SAME_SOURCE: Span = ({}, {})


def _streaming_leaves(plan: Any) -> list[Any]:
    leaves = plan.collectLeaves().iterator()
    found = []
    while leaves.hasNext():
        leaf = leaves.next()
        if bool(leaf.isStreaming()):
            found.append(leaf)
    return found


def _leaf_span(leaf: Any, seen: set[str]) -> Span | None:
    """Return a Kafka leaf's ``(start, end)``, :data:`_SAME_SOURCE`, or None (another source)."""
    try:
        shape = str(leaf.getClass().getSimpleName())
        if shape not in V2_LEAVES:
            _log.debug("input offsets: a %s source is not Kafka; not recorded", shape)
            return None
        stream = leaf.stream()
        key = str(stream.toString())
        if key in seen:  # the same source read twice (a self-union): one position
            return _SAME_SOURCE
        seen.add(key)
        name = _source_name(leaf, stream, has_relation=V2_LEAVES[shape])
        if name is None:
            return None
        return _kafka_span(leaf, name)
    except Exception as exc:  # noqa: BLE001 - py4j errors of another Spark's internals
        _log.debug("input offsets: a streaming source not readable (%s); not recorded", _brief(exc))
        return None


def _source_name(leaf: Any, stream: Any, *, has_relation: bool) -> str | None:
    """Return a Kafka source's name (its stream class or table), or None for another source."""
    stream_class = str(stream.getClass().getName())
    if stream_class.startswith(SPARK_KAFKA_PACKAGE):
        return stream_class
    table = str(leaf.relation().table().name()) if has_relation else ""
    if table in KAFKA_TABLES:
        return table
    _log.debug("input offsets: source %s (%s) is not Kafka; not recorded", table, stream_class)
    return None


def _kafka_span(leaf: Any, name: str) -> Span | None:
    try:
        start = _offsets(leaf.startOffset(), "start")
        end = _offsets(leaf.endOffset(), "end")
    except ValueError as exc:
        _log.warning(
            "the offsets of Kafka source %s are not Kafka offsets (%s); not recorded", name, exc
        )
        return None
    return (start or {}), (end or {})


def _offsets(option: Any, what: str) -> dict[TopicPartition, int] | None:
    if not bool(option.isDefined()):
        return None
    return parse_offsets_json(json.loads(str(option.get().json())), what)


def _overlaps(new: dict[TopicPartition, int], known: dict[TopicPartition, int]) -> bool:
    return any(tp in known for tp in new)


def _brief(exc: BaseException) -> str:
    """``exc``'s class and the first line of its message (a py4j error's holds a Java trace)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"
