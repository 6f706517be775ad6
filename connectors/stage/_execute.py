"""Step 4 of one sink call: the ``execute`` callable the coordinator runs the write stage with.

docs/architecture.md, section 9: route each member's rows into its write partitions, run
the write tasks (``mapInArrow``, one Spark job per member) and re-run a failed stage up to
``stage_retries`` times; at-most-once runs once, each partition claimed through the driver.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from connectors.stage import _hooks
from connectors.stage._backchannel import BackChannels, StageEvent, StageRun
from connectors.stage._connector import SinkConnector
from connectors.stage._input import InputSpec, route
from connectors.stage._jobs import Job, run_jobs
from connectors.stage._metrics import EpochRecorder
from connectors.stage._options import StageOptions
from connectors.stage._slots import check_slots
from connectors.stage._task import TaskSpec
from connectors.stage._votes import VoteServer
from txn import (
    CommitMode,
    CompositeResource,
    EpochPlan,
    Guarantee,
    PartitionReport,
    Resource,
    TxnCode,
    TxnError,
    can_retry_stage,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from connectors.stage._slots import Spark

log = logging.getLogger("connectors.stage")


@dataclass(frozen=True, kw_only=True)
class EpochExecution:
    """The write stage of one epoch, run for the coordinator (``txn._coordinator.Execute``).

    ``frames`` / ``input_specs``: each member connector's rows and input spec, in member
    order; ``channels``: the members' back channels (``_backchannel``), told of each run's
    tickets, results and events; ``vote_server`` returns the driver's running vote server
    (None: none used).
    """

    options: StageOptions
    connectors: Sequence[SinkConnector]
    frames: Sequence[DataFrame]
    input_specs: Sequence[InputSpec]
    resource: Resource[Any]
    channels: BackChannels
    recorder: EpochRecorder
    spark: Spark  # the SparkContext, or the Spark Connect session (``_slots``)
    vote_server: Callable[[Spark], VoteServer | None]
    sink_id: str  # the stage's: the one a test's fault plan may be scoped to (``_hooks``)

    def __call__(self, plan: EpochPlan) -> list[PartitionReport]:
        """Route, then run the write stage of ``plan``; one report per partition."""
        aligned = plan.guarantee is Guarantee.EXACTLY_ONCE and plan.mode is CommitMode.ALIGNED
        if aligned:  # again: an in-doubt epoch keeps the parallelism it was planned with
            check_slots(self.spark, plan.parallelism)
        # Step 4.1: route each member's rows into its write partitions.
        jobs = self._route(plan, aligned)
        # Steps 4.2 to 4.4: run the write tasks; re-run a failed stage (not at-most-once).
        if plan.guarantee is Guarantee.AT_MOST_ONCE:
            return self._run_at_most_once(jobs)
        votes = self.vote_server(self.spark) if aligned else None
        return self._run_with_retries(jobs, votes)

    def _route(self, plan: EpochPlan, aligned: bool) -> list[Job]:
        hooks = _hooks.installed(self.sink_id)  # a test's fault plan, if one is installed
        jobs: list[Job] = []
        for index, (connector, frame, input_spec) in enumerate(
            zip(self.connectors, self.frames, self.input_specs, strict=True)
        ):
            offset, width = _share(self.resource, plan, index)
            self.recorder.add_member(index, connector.sink_id, offset, width)
            keep = connector.options.keep_partitioning
            if keep:
                _check_kept(frame, width, plan)
            routed = route(
                connector.transform(frame, input_spec), input_spec, None if keep else width
            )
            jobs.append(
                (
                    routed,
                    TaskSpec(
                        resource=self.resource,
                        plan=plan,
                        aligned=aligned,
                        ordered=input_spec.ordered,
                        hooks=hooks,
                        offset=offset,
                        partitions=width,
                        batch_id=self.recorder.batch_id,
                    ),
                )
            )
        return jobs

    def _run_at_most_once(self, jobs: list[Job]) -> list[PartitionReport]:
        """One run, never repeated; with the driver channel, one claim per partition."""
        server = self.vote_server(self.spark)
        if server is None:
            return self._run_once(jobs, 0, None)
        with server.claiming(jobs[0][1].plan) as claims:
            claimed = [(df, replace(spec, claims=claims)) for df, spec in jobs]
            return self._run_once(claimed, 0, None)

    def _run_with_retries(self, jobs: list[Job], votes: VoteServer | None) -> list[PartitionReport]:
        """Run the write stage; re-run it up to ``stage_retries`` times after a failure.

        Re-running is safe: each task fences the previous attempt's clients and skips
        by marker what already committed. Spark itself cannot retry a failed barrier
        result stage, so in aligned mode this is the only retry within one call. Each
        run is its own vote round (stage run ``run``, fresh token).
        """
        retries = self.options.effective_stage_retries
        run = 0
        while True:
            try:
                return self._run_once(jobs, run, votes)
            except Exception as exc:
                if run >= retries or not can_retry_stage(exc):
                    raise
                run += 1
                self.channels.event(StageEvent.STAGE_RERUN)
                log.warning(
                    "epoch %d write stage failed (%s: %s); re-running it (retry %d of %d)",
                    jobs[0][1].plan.epoch,
                    type(exc).__name__,
                    str(exc)[:300],
                    run,
                    retries,
                )

    def _run_once(
        self, jobs: list[Job], stage_run: int, votes: VoteServer | None
    ) -> list[PartitionReport]:
        plan = jobs[0][1].plan
        run = StageRun(plan=plan, stage_run=stage_run)
        tickets = self.channels.tickets(run)
        runs = [(df, replace(spec, tickets=tickets)) for df, spec in jobs]
        started = time.monotonic()
        try:
            reports, stats = run_jobs(runs, votes, stage_run, self._on_task_retry)
        except BaseException:
            self.recorder.stage_ran(time.monotonic() - started, (), failed=True)
            raise
        self.recorder.stage_ran(time.monotonic() - started, stats, failed=False)
        notes = [note for s in stats for note in s.notes]
        shares = [_share(self.resource, plan, i) for i in range(len(self.connectors))]
        self.channels.observe(run, reports, notes, shares)
        return reports

    def _on_task_retry(self) -> None:
        self.channels.event(StageEvent.TASK_RETRY)


def _share(resource: Resource[Any], plan: EpochPlan, index: int) -> tuple[int, int]:
    """Member ``index``'s partitions of ``plan``: (offset, count)."""
    if isinstance(resource, CompositeResource):
        return resource.offsets[index], resource.members[index].parallelism
    return 0, plan.parallelism


def _check_kept(frame: DataFrame, width: int, plan: EpochPlan) -> None:
    """``keep_partitioning``: the input must have the partitions the plan was made for.

    An input without partitions (an empty batch) counts as one, as in ``_shares.member_width``.
    """
    actual = max(1, int(frame.rdd.getNumPartitions()))
    if actual != width:
        msg = (
            f"epoch {plan.epoch} was planned with {width} write partitions (keep_partitioning), "
            f"but the replayed batch has {actual} input partitions; read it with the same "
            "source settings (e.g. minPartitions) until the epoch has committed"
        )
        raise TxnError(msg, code=TxnCode.PLAN_MISMATCH)
