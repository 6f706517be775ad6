"""One run of the write stage: a Spark job per member, one vote round for all of them.

A sink with one connector runs one job. A composite sink (one epoch across several
systems) runs one job per member at the same time: the members' tasks are the plan's
partitions ``offset .. offset + P - 1`` each, and aligned votes of every member meet in
one round of the driver's vote server. When a member's job fails, the round is broken at
once, so the other members' tasks stop waiting for votes that will never come and abort.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from connectors.stage._metrics import TaskStats
from connectors.stage._run import run_write_stage
from connectors.stage._task import TaskSpec
from connectors.stage._votes import VoteServer
from txn import PartitionReport

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Job = tuple["DataFrame", TaskSpec]  # (routed DataFrame, the spec of its tasks)


def run_jobs(
    jobs: Sequence[Job],
    votes: VoteServer | None,
    stage_run: int,
    on_task_retry: Callable[[], None],
) -> tuple[list[PartitionReport], list[TaskStats]]:
    """Run every job of one stage run; return all reports (plan order) and task stats.

    Raises:
        Exception: the first failure of any job, once every job has ended.

    """
    if votes is None:
        return _run_all(jobs, on_task_retry, None)
    plan = jobs[0][1].plan
    with votes.voting(plan, stage_run) as ticket:
        voting = [(df, replace(spec, votes=ticket)) for df, spec in jobs]
        return _run_all(voting, on_task_retry, lambda: votes.close_round(ticket))


def _run_all(
    jobs: Sequence[Job],
    on_task_retry: Callable[[], None],
    on_failure: Callable[[], None] | None,
) -> tuple[list[PartitionReport], list[TaskStats]]:
    if len(jobs) == 1:
        return run_write_stage(jobs[0][0], jobs[0][1], on_task_retry)
    from pyspark import InheritableThread  # keeps the query's local properties

    results: list[tuple[list[PartitionReport], list[TaskStats]] | None] = [None] * len(jobs)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(index: int) -> None:
        df, spec = jobs[index]
        try:
            results[index] = run_write_stage(df, spec, on_task_retry)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after every job ended
            with lock:
                errors.append(exc)
            if on_failure is not None:
                on_failure()  # break the round: the other jobs' tasks abort at once

    threads = [InheritableThread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    reports = [r for res in results if res for r in res[0]]
    stats = [s for res in results if res for s in res[1]]
    return sorted(reports, key=lambda r: r.partition), stats
