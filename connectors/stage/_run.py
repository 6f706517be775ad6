"""The driver side of one run of the write stage: submit the Spark job, collect the reports."""

from __future__ import annotations

import dataclasses
import functools
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING

from connectors.stage._errors import StageCode, StageError
from connectors.stage._metrics import TaskStats
from connectors.stage._task import RESULT_SCHEMA, TaskResult, TaskSpec, write_task
from txn import PartitionReport

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row


def run_write_stage(
    df: DataFrame, spec: TaskSpec, on_task_retry: Callable[[], None] | None = None
) -> tuple[list[PartitionReport], list[TaskStats]]:
    """Run the write stage of ``spec.plan`` over the routed ``df``; one report per task.

    Returns the reports (one per partition) and what each task measured.

    When Spark runs no task at all (an empty batch optimized away to no partitions), the
    stage runs again over ``spec.task_count`` placeholder partitions with
    ``spec.empty_input``: every partition still opens, pre-commits an empty transaction and
    votes, in the same vote round (docs/architecture.md, "Empty epochs"). No report is
    ever made up for a partition whose task did not run.

    ``on_task_retry`` is called when a result came from a Spark task retry (attempt > 0):
    that attempt's fresh clients may have fenced clients pooled elsewhere.

    Raises:
        txn.TxnError: an error a re-run cannot fix, re-raised typed from the task.
        StageCode.STAGE_PARTITIONING: Spark ran another number of tasks than planned.

    """
    rows = _collect(df, spec)
    if not rows:
        count = spec.task_count
        placeholders = df.sparkSession.range(0, count, 1, count)
        rows = _collect(placeholders, dataclasses.replace(spec, empty_input=True))
    results: list[TaskResult] = sorted(
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
    stats = [r.stats for r in results if r.stats is not None]
    mine = range(spec.offset, spec.offset + spec.task_count)
    if [r.partition for r in reports] != list(mine):
        msg = (
            f"epoch {plan.epoch}: the write stage returned {len(reports)} reports for "
            f"{spec.task_count} partitions; Spark changed the partitioning (disable "
            "spark.sql.adaptive coalescing for this query) and the epoch stays in doubt"
        )
        raise StageError(msg, code=StageCode.STAGE_PARTITIONING)
    return reports, stats


def _collect(df: DataFrame, spec: TaskSpec) -> list[Row]:
    """Run the write tasks of ``spec`` over ``df``'s partitions; return their result rows."""
    fn = functools.partial(write_task, spec)
    return list(df.mapInArrow(fn, RESULT_SCHEMA, barrier=spec.aligned).collect())
