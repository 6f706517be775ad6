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

A source is Kafka when it is the kit's ``kafka-rc`` or Spark's ``kafka`` (v2 streams);
any other streaming source is counted in ``InputOffsets.other_sources``. Outside a
streaming query, under Spark Connect (no py4j gateway) or when Spark's internals answer
differently, the result is None (nothing recorded; resuming from the output is then
refused, saying why).
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
_V2_RELATIONS = ("StreamingDataSourceV2ScanRelation", "StreamingDataSourceV2Relation")


def batch_input(df: DataFrame, query_id: str | None, batch_id: int) -> InputOffsets | None:
    """Return the input offsets of ``batch_id`` of query ``query_id`` (module docstring)."""
    if query_id is None:
        return None
    try:
        execution = _incremental_execution(df, query_id)
        if execution is None or int(execution.currentBatchId()) != batch_id:
            return None
        return _from_plan(execution.logical())
    except Exception as exc:  # noqa: BLE001 - py4j errors of another Spark's internals
        _log.warning("input offsets of batch %d not readable (%s); not recorded", batch_id, exc)
        return None


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


def _from_plan(plan: Any) -> InputOffsets:
    starts: dict[TopicPartition, int] = {}
    ends: dict[TopicPartition, int] = {}
    other = 0
    seen: set[str] = set()
    leaves = plan.collectLeaves().iterator()
    while leaves.hasNext():
        leaf = leaves.next()
        if not bool(leaf.isStreaming()):
            continue
        if leaf.getClass().getSimpleName() not in _V2_RELATIONS:
            other += 1
            continue
        stream = leaf.stream()
        key = str(stream.toString())
        if key in seen:  # the same source read twice (a self-union): one position
            continue
        seen.add(key)
        span = _kafka_span(leaf, stream)
        if span is None or _overlaps(span[1], ends):
            other += 1
            continue
        starts.update(span[0])
        ends.update(span[1])
    return InputOffsets.of(starts, ends, other)


def _kafka_span(
    leaf: Any, stream: Any
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]] | None:
    """``(start, end)`` of a Kafka source's relation, or None for another source."""
    if not (_table_name(leaf) in KAFKA_TABLES or _class(stream).startswith(SPARK_KAFKA_PACKAGE)):
        return None
    try:
        start = _offsets(leaf.startOffset(), "start")
        end = _offsets(leaf.endOffset(), "end")
    except ValueError as exc:
        _log.warning("a Kafka source's offsets are not Kafka offsets (%s); not recorded", exc)
        return None
    return (start or {}), (end or {})


def _table_name(leaf: Any) -> str:
    relation = leaf.relation() if hasattr(leaf, "relation") else leaf
    try:
        return str(relation.table().name())
    except Exception:  # noqa: BLE001 - a relation without a named table
        return ""


def _class(obj: Any) -> str:
    return str(obj.getClass().getName())


def _offsets(option: Any, what: str) -> dict[TopicPartition, int] | None:
    if not bool(option.isDefined()):
        return None
    return parse_offsets_json(json.loads(str(option.get().json())), what)


def _overlaps(new: dict[TopicPartition, int], known: dict[TopicPartition, int]) -> bool:
    return any(tp in known for tp in new)
