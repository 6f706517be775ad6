"""The Spark side of one epoch: input checks, deterministic routing, the write stage.

Driver steps (:func:`prepare` then :func:`run_write_stage`):

1. check the input schema against Spark's Kafka sink columns (typed error naming the
   column, before anything is logged or written);
2. changelog: drop ``update_before`` rows, turn ``delete`` rows into tombstones;
3. compute in the JVM a 64-bit content hash per row (``_eos_hash``) and a routing hash
   (``xxhash64`` of the key, or of the value when the key is null), and repartition by
   the routing hash into exactly P partitions: the same row lands in the same write
   partition whatever the upstream partitioning; with ``order_by`` sort inside;
4. run one task per write partition with ``mapInArrow`` (``barrier=True`` in aligned
   mode: all tasks run at once and one failed task kills the others); aligned votes are
   gathered through the driver's vote server (``TaskSpec.votes``, see ``_votes``) or,
   with ``vote_channel="barrier"``, ``BarrierTaskContext.allGather``; each task returns
   one row, a pickled :class:`TaskResult`, collected on the driver.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from connectors.kafka._config import SinkConfig
from connectors.kafka._errors import (
    InputError,
    InputSchemaError,
    KafkaSinkError,
    VoteChannelError,
)
from connectors.kafka._participant import KafkaResource
from connectors.kafka._rows import HASH_COLUMN, ArrowPartition
from connectors.kafka._votes import VoteTicket, gather_votes, vote_from_doc, vote_to_doc
from connectors.kafka._writer import Layout
from txn import (
    EpochPlan,
    NonDeterministicReplayError,
    PartitionOutcome,
    PartitionReport,
    TaskStep,
    Vote,
    run_partition,
)

ROUTE_COLUMN = "_eos_route"
RESULT_SCHEMA = "payload binary"
_STRING_OR_BINARY = ("string", "binary")
# Map of txn task steps to FaultPlan step names.
_FAULT_STEPS = {
    TaskStep.OPENED: "after_open",
    TaskStep.PRE_COMMITTED: "after_pre_commit",
    TaskStep.DECIDED: "before_commit",
    TaskStep.COMMITTED: "after_commit",
}
# Errors a task reports back instead of failing: retrying them cannot help.
_DETERMINISTIC = (InputError, NonDeterministicReplayError)


@dataclass(frozen=True)
class TaskResult:
    """What one write task sends back: its report, or a deterministic error (pickled)."""

    partition: int
    report: PartitionReport | None = None
    error: bytes | None = None
    task_attempt: int = 0


@dataclass(frozen=True)
class TaskSpec:
    """Everything a write task needs; picklable (plain config, no clients).

    ``votes``: the driver vote channel's ticket of this stage run (aligned mode with
    ``vote_channel="driver"``); None gathers with ``allGather`` (aligned) or not at all.
    ``stage_attempt``: the sink's run of the write stage within one call (0 first).
    """

    resource: KafkaResource
    plan: EpochPlan
    aligned: bool
    votes: VoteTicket | None = None
    stage_attempt: int = 0


def may_reuse_clients(spec: TaskSpec, task_attempt: int) -> bool:
    """Return True if the task may reuse its process's pooled producer.

    Only the first attempt of a task, in the first stage run, of the first plan attempt
    of an epoch: any retry (Spark task retry, stage re-run, in-doubt redo) creates a new
    producer whose ``init_transactions`` aborts a dead attempt's open transaction.
    """
    return task_attempt == 0 and spec.stage_attempt == 0 and spec.plan.attempt == 0


def _type_name(dtype: Any) -> str:
    return str(dtype.simpleString())


def input_layout(schema: Any, cfg: SinkConfig) -> Layout:
    """Check ``schema`` (a Spark StructType) and return which optional columns are present.

    Raises:
        InputSchemaError: a required column is missing or a column has a wrong type.

    """
    types = {f.name: _type_name(f.dataType) for f in schema.fields}

    def check(name: str, allowed: Sequence[str], fix: str) -> None:
        if name in types and types[name] not in allowed:
            msg = (
                f"column {name!r} has type {types[name]}; the Kafka sink needs "
                f"{' or '.join(allowed)}: {fix}"
            )
            raise InputSchemaError(msg, column=name)

    if "value" not in types:
        msg = (
            "the DataFrame has no 'value' column; select one, e.g. "
            "df.selectExpr('CAST(id AS STRING) AS key', 'to_json(struct(*)) AS value')"
        )
        raise InputSchemaError(msg, column="value")
    check("value", _STRING_OR_BINARY, "cast it, e.g. col('value').cast('string') or to_json(...)")
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
        raise InputSchemaError(msg, column="topic")
    if cfg.changelog:
        if "op" not in types:
            msg = (
                "changelog=True needs an 'op' column (insert / update_before / update_after / "
                "delete); add it or use changelog=False"
            )
            raise InputSchemaError(msg, column="op")
        check("op", ("string",), "cast it with col('op').cast('string')")
        if "key" not in types:
            msg = "changelog=True needs a 'key' column: upserts and deletes are keyed"
            raise InputSchemaError(msg, column="key")
    for name in cfg.order_by:
        if name not in types:
            msg = f"order_by names column {name!r}, which the DataFrame does not have"
            raise InputSchemaError(msg, column=name)
    return Layout(
        key="key" in types,
        topic="topic" in types,
        partition="partition" in types,
        headers="headers" in types,
        changelog=cfg.changelog,
    )


def data_columns(layout: Layout) -> list[str]:
    """Return the columns shipped to the write tasks, in order."""
    names = ["key"] if layout.key else []
    names.append("value")
    names += [n for n, present in (("topic", layout.topic), ("partition", layout.partition),
                                   ("headers", layout.headers), ("op", layout.changelog)) if present]
    return names


def prepare(df: Any, cfg: SinkConfig, layout: Layout, parallelism: int) -> Any:
    """Return ``df`` routed into ``parallelism`` partitions with the hash column (steps 2-3)."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias

    if layout.changelog:
        df = df.filter(~F.col("op").eqNullSafe(F.lit("update_before")))
        df = df.withColumn(
            "value", F.when(F.col("op") == F.lit("delete"), F.lit(None)).otherwise(F.col("value"))
        )
    names = data_columns(layout)
    hashed = [c for n in names for c in (F.isnull(F.col(n)), F.col(n))]
    row_hash = F.xxhash64(*hashed).alias(HASH_COLUMN)
    if layout.key:
        route = F.when(F.col("key").isNotNull(), F.xxhash64(F.col("key"))).otherwise(
            F.xxhash64(F.lit(1), F.col("value"))
        )
    else:
        route = F.xxhash64(F.lit(1), F.col("value"))
    order = [F.col(c).alias(f"_eos_order_{i}") for i, c in enumerate(cfg.order_by)]
    routed = df.select(*[F.col(n) for n in names], *order, row_hash, route.alias(ROUTE_COLUMN))
    routed = routed.repartition(parallelism, F.col(ROUTE_COLUMN))
    if cfg.order_by:
        keys = [f"_eos_order_{i}" for i in range(len(cfg.order_by))]
        routed = routed.sortWithinPartitions(*keys, HASH_COLUMN)
    return routed.select(*names, HASH_COLUMN)


def _vote_to_json(vote: Vote) -> str:
    return json.dumps(vote_to_doc(vote))


def _vote_from_json(raw: str) -> Vote:
    return vote_from_doc(json.loads(raw))


def _gatherer(spec: TaskSpec, ctx: Any) -> Callable[[Vote], list[Vote]] | None:
    """Return the task's vote gathering function (None: unaligned, decide alone)."""
    if not spec.aligned:
        return None
    ticket = spec.votes
    if ticket is None:
        return lambda vote: [_vote_from_json(m) for m in ctx.allGather(_vote_to_json(vote))]

    def gather(vote: Vote) -> list[Vote]:
        tasks = len(ctx.getTaskInfos())  # local: Spark hands every task the stage's size
        if tasks != ticket.parallelism:
            msg = (
                f"epoch {ticket.epoch}: the barrier stage has {tasks} tasks but the plan has "
                f"{ticket.parallelism} write partitions; Spark changed the partitioning "
                "(disable spark.sql.adaptive coalescing for this query)"
            )
            raise VoteChannelError(msg)
        return gather_votes(ticket, vote)

    return gather


def _spill_dir() -> str | None:
    local = os.environ.get("SPARK_LOCAL_DIRS", "")
    return local.split(",")[0] or None


def write_task(spec: TaskSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Body of one write task (runs in a Spark Python worker)."""
    from pyspark import BarrierTaskContext, TaskContext

    ctx: Any = BarrierTaskContext.get() if spec.aligned else TaskContext.get()
    partition = int(ctx.partitionId())
    cfg = spec.resource.cfg
    faults = cfg.fault_plan

    def hooks(step: TaskStep, plan: EpochPlan, p: int) -> None:
        name = _FAULT_STEPS.get(step)
        if faults is not None and name is not None:
            faults.fire(name, plan.epoch, p)

    task_attempt = int(ctx.attemptNumber())
    resource = replace(spec.resource, reuse_clients=may_reuse_clients(spec, task_attempt))
    rows = ArrowPartition(batches, ordered=bool(cfg.order_by), spill_dir=_spill_dir())
    try:
        report = run_partition(
            resource, spec.plan, partition, rows,
            gather=_gatherer(spec, ctx), hooks=hooks,
        )
        result = TaskResult(partition, report=report, task_attempt=task_attempt)
    except _DETERMINISTIC as exc:
        result = TaskResult(partition, error=pickle.dumps(exc), task_attempt=task_attempt)
    finally:
        rows.close()
    yield pa.RecordBatch.from_pydict({"payload": [pickle.dumps(result)]})


def run_write_stage(
    df: Any, spec: TaskSpec, on_task_retry: Callable[[], None] | None = None
) -> list[PartitionReport]:
    """Run the write stage of ``spec.plan`` over the prepared ``df``; one report per task.

    ``on_task_retry`` is called when a result came from a Spark task retry (attempt > 0):
    that attempt's ``init_transactions`` may have fenced producers pooled elsewhere.

    Raises:
        InputError / NonDeterministicReplayError: re-raised from the task that found it.

    """
    fn = functools.partial(write_task, spec)
    rows = df.mapInArrow(fn, RESULT_SCHEMA, barrier=spec.aligned).collect()
    results = sorted(
        (pickle.loads(bytes(r["payload"])) for r in rows),  # noqa: S301 - our own task results
        key=lambda r: r.partition,
    )
    if on_task_retry is not None and any(r.task_attempt > 0 for r in results):
        on_task_retry()
    for result in results:
        if result.error is not None:
            raise pickle.loads(result.error)  # noqa: S301 - our own task results
    plan = spec.plan
    reports = [r.report for r in results if r.report is not None]
    if not reports:
        # Spark ran no task at all: the input was empty and was optimized away.
        return [PartitionReport(plan.epoch, p, PartitionOutcome.COMMITTED)
                for p in range(plan.parallelism)]
    if len(reports) != plan.parallelism:
        msg = (
            f"epoch {plan.epoch}: the write stage returned {len(reports)} reports for "
            f"{plan.parallelism} partitions; Spark changed the partitioning (disable "
            "spark.sql.adaptive coalescing for this query) and the epoch stays in doubt"
        )
        raise KafkaSinkError(msg)
    return reports
