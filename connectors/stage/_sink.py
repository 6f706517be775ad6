"""``TransactionalSink``: any connector on the generic stage as a ``foreachBatch`` callable."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from connectors.stage import _hooks
from connectors.stage._binding import QueryBinder, query_id_of
from connectors.stage._connector import SinkConnector
from connectors.stage._errors import SinkStoppedError, SparkConnectError
from connectors.stage._input import InputPlan, route
from connectors.stage._jobs import Job, run_jobs
from connectors.stage._lifecycle import RunningQuery, SinkLifecycle, take_over
from connectors.stage._metrics import CountingLog, EpochMetrics, EpochRecorder, MetricsBook
from connectors.stage._options import StageOptions
from connectors.stage._reuse import ReusePolicy
from connectors.stage._slots import check_slots
from connectors.stage._task import TaskSpec
from connectors.stage._votes import VoteServer, server_hosts
from txn import (
    CommitMode,
    CompositeResource,
    Coordinator,
    CoordinatorStep,
    EpochHistory,
    EpochLog,
    EpochPlan,
    EpochResult,
    Guarantee,
    Member,
    PartitionReport,
    PlanMismatchError,
    Resource,
    can_retry_stage,
)

log = logging.getLogger("connectors.stage")

_DRIVER_STEPS = {
    CoordinatorStep.PLAN_LOGGED: _hooks.DRIVER_AFTER_PLAN,
    CoordinatorStep.REPORTS_RECEIVED: _hooks.DRIVER_BEFORE_COMPLETE,
    CoordinatorStep.DECISION_LOGGED: _hooks.DRIVER_AFTER_DECISION,
}
# Seconds stop_gracefully waits by default for the epoch in flight to commit.
STOP_TIMEOUT_S = 300.0

Select = Callable[[Any], Any]


@dataclass(frozen=True)
class _Member:
    """A connector of the sink and how it gets its rows from the micro-batch."""

    connector: SinkConnector
    select: Select | None = None

    def frame(self, df: Any) -> Any:
        return df if self.select is None else self.select(df)


class TransactionalSink(SinkLifecycle):
    """A ``foreachBatch`` sink: the connector's resource driven through the 2PC protocol.

    One call ``sink(df, batch_id)`` runs one epoch (docs/architecture.md: section 2, the
    protocol; section 9, this class's steps in full): check the input; on the first call
    preflight and recover; map the batch to its epoch (the query binding, ``_binding``);
    plan, route, run the write stage (re-run up to ``stage_retries`` times unless the error
    says a re-run cannot help), complete. Each call records :class:`EpochMetrics`.

    Thread-safe; one sink object per query. :meth:`stop_gracefully` stops a query after
    the epoch in flight. The epoch log (and its lock) is held from the first call until
    :meth:`close`, the end of a ``with`` block, :meth:`stop_gracefully` or collection; a
    new sink object of the same ``sink_id`` in this process takes it over once the old
    object's query stopped (``_owners``). Pickling keeps the connector only (Spark Connect
    ships the ``foreachBatch`` function): the receiving process opens its own epoch log,
    runs its own preflight and recovery.
    """

    def __init__(self, connector: SinkConnector) -> None:
        self._sink_id = connector.sink_id
        self._options = connector.options
        self._members: tuple[_Member, ...] = (_Member(connector),)
        self._log_factory: Callable[[], EpochLog] = connector.open_epoch_log
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._init_lifecycle()
        self._preflight_done = False
        self._recovered = False
        self._reuse = ReusePolicy()
        self._binder = QueryBinder(self._sink_id, start_over=self._options.start_over)
        self._book = MetricsBook()
        self._stopping = threading.Event()

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in ("_sink_id", "_options", "_members", "_log_factory")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    @property
    def connector(self) -> SinkConnector:
        """The connector this sink drives (the first member's, for a composite sink)."""
        return self._members[0].connector

    # -- foreachBatch entry points -------------------------------------------------------
    def __call__(self, df: Any, batch_id: int) -> EpochResult:
        """``foreachBatch`` callable: same as :meth:`write`."""
        return self.write(df, batch_id)

    def write(self, df: Any, batch_id: int) -> EpochResult:
        """Write micro-batch ``batch_id`` of ``df`` (steps in the class docstring).

        Raises:
            SinkStoppedError: :meth:`stop_gracefully` was called; nothing of the batch is
                written and Spark replays it on the next start.

        """
        self._refuse_if_stopping(batch_id)
        frames = [m.frame(df) for m in self._members]
        plans_in = [m.connector.check_input(f.schema) for m, f in zip(self._members, frames,
                                                                     strict=True)]
        query_id = query_id_of(df)
        with self._lock:
            self._refuse_if_stopping(batch_id)
            if query_id is not None:
                self._query = RunningQuery(query_id, df.sparkSession)
            recorder = EpochRecorder(self._sink_id, batch_id, query_id)
            appends_before = self._open_log().appends
            try:
                result = self._write_locked(frames, plans_in, query_id, batch_id, recorder)
            except BaseException as exc:
                self._reuse.renew("a failed epoch: retries may have fenced pooled clients")
                self._record(recorder.finish(None, self._open_log().appends - appends_before, exc))
                raise
            self._record(recorder.finish(result, self._open_log().appends - appends_before))
            return result

    def _refuse_if_stopping(self, batch_id: int) -> None:
        if self._stopping.is_set():
            msg = (f"sink {self._sink_id!r} is stopping; batch {batch_id} was not "
                   "written and is replayed when the query starts again")
            raise SinkStoppedError(msg)

    def _write_locked(
        self, frames: list[Any], plans_in: list[InputPlan], query_id: str | None,
        batch_id: int, recorder: EpochRecorder,
    ) -> EpochResult:
        opts = self._options
        if not self._preflight_done:
            for member in self._members:
                member.connector.preflight()
            self._preflight_done = True
        sc = _spark_context(frames[0])
        if sc is None and opts.aligned:
            msg = ("aligned mode needs the SparkContext (the slot check and the driver's vote "
                   "server), which a Spark Connect session does not have; use "
                   "mode='unaligned' with an explicit parallelism under Spark Connect")
            raise SparkConnectError(msg)
        widths = [_width(m.connector.options, f, sc) for m, f in zip(self._members, frames,
                                                                  strict=True)]
        resource = self._resource(plans_in, widths)
        coordinator = self._coordinator(resource)
        if not self._recovered:
            self._reuse.renew("recovery fences every id it touches")
            report = coordinator.recover()
            self._recovered = True
            log.info("sink %s recovered: %s", self._sink_id, report)
        epoch = self._binder.epoch(self._open_log(), query_id, batch_id)
        recorder.epoch = epoch
        parallelism = sum(widths)
        if opts.aligned:
            check_slots(sc, parallelism)
        if sc is not None and (opts.aligned or opts.guarantee is Guarantee.AT_MOST_ONCE):
            self._vote_server(sc)  # started before the plan is logged: fail early
        return coordinator.run_epoch(
            epoch, parallelism,
            lambda plan: self._execute(frames, plans_in, resource, plan, recorder),
        )

    def _resource(self, plans_in: Sequence[InputPlan], widths: Sequence[int]) -> Resource[Any]:
        """One member's resource, or the composite of every member's (one epoch for all)."""
        resources = [m.connector.resource(p) for m, p in zip(self._members, plans_in, strict=True)]
        if len(resources) == 1:
            return resources[0]
        return CompositeResource([Member(r, w) for r, w in zip(resources, widths, strict=True)])

    def _record(self, metrics: EpochMetrics) -> None:
        self._book.add(metrics)
        limit = min((w for m in self._members
                     if (w := m.connector.options.warn_after_s) is not None), default=None)
        if (not metrics.skipped and metrics.epoch >= 0 and limit is not None  # -1: no epoch yet
                and metrics.epoch_ms > limit * 1000.0):
            log.warning(
                "epoch %d took %.1fs, more than %.0fs: a slower batch risks a transaction "
                "timeout (the epoch is then redone); raise the timeout or shorten the "
                "trigger interval", metrics.epoch, metrics.epoch_ms / 1000.0, limit,
            )

    # -- steps -------------------------------------------------------------------------
    def _open_log(self) -> CountingLog:
        if self._res.log is None:
            query_id = self._query.query_id if self._query is not None else None
            take_over(self._owner_key, self, query_id)  # SinkInUseError: its query runs
            self._res.log = CountingLog(self._log_factory())
        return self._res.log


    def _coordinator(self, resource: Resource[Any]) -> Coordinator[Any]:
        opts = self._options
        return Coordinator(
            self._open_log(), resource, sink_id=self._sink_id,
            guarantee=opts.guarantee, mode=opts.effective_mode, hooks=self._driver_hook,
        )

    def _driver_hook(self, step: CoordinatorStep, epoch: int) -> None:
        name = _DRIVER_STEPS.get(step)
        faults = self._options.fault_plan
        if faults is not None and name is not None:
            faults.fire(name, epoch)

    def _vote_server(self, sc: Any) -> VoteServer | None:
        """Return the running vote server (started now if needed); None for "barrier".

        None too under Spark Connect (no SparkContext): at-most-once then lets only a
        task's first attempt write (the aligned mode is refused before).
        """
        if self._options.vote_channel != "driver" or sc is None:
            return None
        if self._res.votes is None or not self._res.votes.running:
            conf = sc.getConf()
            bind, advertise = server_hosts(str(sc.master), lambda key: conf.get(key, None))
            self._res.votes = VoteServer(bind, advertise).start()
        return self._res.votes

    def _execute(
        self, frames: list[Any], plans_in: list[InputPlan], resource: Resource[Any],
        plan: EpochPlan, recorder: EpochRecorder,
    ) -> list[PartitionReport]:
        opts = self._options
        sc = _spark_context(frames[0])
        aligned = plan.guarantee is Guarantee.EXACTLY_ONCE and plan.mode is CommitMode.ALIGNED
        if aligned:  # again: an in-doubt epoch keeps the parallelism it was planned with
            check_slots(sc, plan.parallelism)
        ticket = self._reuse.ticket(plan, 0)
        jobs: list[Job] = []
        for index, (member, frame, plan_in) in enumerate(zip(self._members, frames, plans_in,
                                                             strict=True)):
            offset, width = _share(resource, plan, index)
            recorder.add_member(index, member.connector.sink_id, offset, width)
            keep = member.connector.options.keep_partitioning
            if keep:
                _check_kept(frame, width, plan)
            routed = route(member.connector.transform(frame, plan_in), plan_in,
                           None if keep else width)
            hooks = member.connector.options.fault_plan or opts.fault_plan
            jobs.append((routed, TaskSpec(resource, plan, aligned, ticket, ordered=plan_in.ordered,
                                          hooks=hooks, offset=offset, partitions=width)))
        votes = self._vote_server(sc) if aligned else None
        if plan.guarantee is Guarantee.AT_MOST_ONCE:
            reports = self._run_at_most_once(sc, jobs, recorder)
        else:
            reports = self._run_with_retries(jobs, votes, recorder)
        if opts.fault_plan is not None:
            opts.fault_plan.fire(_hooks.DRIVER_AFTER_STAGE, plan.epoch)
        return reports

    def _run_at_most_once(
        self, sc: Any, jobs: list[Job], recorder: EpochRecorder
    ) -> list[PartitionReport]:
        """One run, never repeated; with the driver channel, one claim per partition."""
        server = self._vote_server(sc)
        if server is None:
            return self._run_once(jobs, 0, None, recorder)
        with server.claiming(jobs[0][1].plan) as claims:
            claimed = [(df, replace(spec, claims=claims)) for df, spec in jobs]
            return self._run_once(claimed, 0, None, recorder)

    def _run_with_retries(
        self, jobs: list[Job], votes: VoteServer | None, recorder: EpochRecorder
    ) -> list[PartitionReport]:
        """Run the write stage; re-run it up to ``stage_retries`` times after a failure.

        Re-running is safe: each task fences the previous attempt's clients and skips
        by marker what already committed. Spark itself cannot retry a failed barrier
        result stage, so in aligned mode this is the only retry within one call. Each
        run is its own vote round (stage attempt ``attempt``, fresh token).
        """
        retries = self._options.effective_stage_retries
        attempt = 0
        while True:
            try:
                return self._run_once(jobs, attempt, votes, recorder)
            except Exception as exc:
                if attempt >= retries or not can_retry_stage(exc):
                    raise
                attempt += 1
                self._reuse.renew("a stage re-run fences the failed run's clients")
                log.warning(
                    "epoch %d write stage failed (%s: %s); re-running it (retry %d of %d)",
                    jobs[0][1].plan.epoch, type(exc).__name__, str(exc)[:300], attempt, retries,
                )

    def _run_once(
        self, jobs: list[Job], attempt: int, votes: VoteServer | None, recorder: EpochRecorder,
    ) -> list[PartitionReport]:
        ticket = self._reuse.ticket(jobs[0][1].plan, attempt)
        runs = [(df, replace(spec, reuse=ticket)) for df, spec in jobs]
        started = time.monotonic()
        try:
            reports, stats = run_jobs(runs, votes, attempt, self._on_task_retry)
        except BaseException:
            recorder.stage_ran(time.monotonic() - started, (), failed=True)
            raise
        recorder.stage_ran(time.monotonic() - started, stats, failed=False)
        return reports

    def _on_task_retry(self) -> None:
        self._reuse.renew("a Spark task retry fenced the failed attempt's clients")

    # -- operations ----------------------------------------------------------------------
    def metrics(self) -> tuple[EpochMetrics, ...]:
        """Return the sink's recent epochs (at most ``RECENT_EPOCHS``), oldest first."""
        return self._book.recent()

    def metrics_for(self, query_id: str | None, batch_id: int) -> EpochMetrics | None:
        """Return the metrics of ``batch_id`` of ``query_id`` (None: any query), if kept."""
        return self._book.for_batch(query_id, batch_id)

    def request_stop(self) -> None:
        """Accept no new epoch: a later call raises :class:`SinkStoppedError`, writing nothing."""
        self._stopping.set()

    def stop_gracefully(self, query: Any, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """Stop ``query`` once the epoch in flight (if any) has committed.

        1. no new epoch starts (:meth:`request_stop`); a batch Spark starts meanwhile fails
           with :class:`SinkStoppedError` before writing anything and is replayed on the
           next start;
        2. wait up to ``timeout_s`` for the epoch in flight to finish;
        3. ``query.stop()``, then :meth:`close` (the log's lock is released; if the epoch
           in flight still runs, it keeps the log until it ends, and a new sink object
           of the same id takes it over then).

        Returns False if the epoch in flight did not finish in time (the query is stopped
        anyway; that epoch stays in doubt and the next start completes it, exactly once).
        Until then it is partly visible in unaligned mode, as after a plain ``query.stop()``
        (docs/operations.md, "Stopping a query").
        """
        self.request_stop()
        finished = self._lock.acquire(timeout=timeout_s)
        if finished:
            self._lock.release()
        query.stop()
        self.close(wait=False)
        return finished

    def epoch_log_history(self) -> EpochHistory:
        """Return the sink's epoch log as folded history (reads; never fences a running sink)."""
        with self._lock:
            return self._open_log().load()


def _share(resource: Resource[Any], plan: EpochPlan, index: int) -> tuple[int, int]:
    """Member ``index``'s partitions of ``plan``: (offset, count)."""
    if isinstance(resource, CompositeResource):
        return resource.offsets[index], resource.members[index].parallelism
    return 0, plan.parallelism


def _spark_context(frame: Any) -> Any:
    """Return the SparkContext of ``frame``'s session, or None under Spark Connect."""
    try:
        return frame.sparkSession.sparkContext
    except (AttributeError, NotImplementedError):  # Connect: PySparkAttributeError
        return None


def _width(options: StageOptions, frame: Any, sc: Any) -> int:
    """Return a member's write partitions for a new epoch: the input's, the option's or Spark's."""
    if options.keep_partitioning:
        return max(1, int(frame.rdd.getNumPartitions()))
    if options.parallelism:
        return options.parallelism
    if sc is None:
        msg = ("the sink has no parallelism option and Spark Connect gives no default "
               "parallelism (no SparkContext); pass parallelism= to the sink")
        raise SparkConnectError(msg)
    return max(1, int(sc.defaultParallelism))


def _check_kept(frame: Any, width: int, plan: EpochPlan) -> None:
    """``keep_partitioning``: the input must have the partitions the plan was made for.

    An input without partitions (an empty batch) counts as one, as in :func:`_width`.
    """
    actual = max(1, int(frame.rdd.getNumPartitions()))
    if actual != width:
        msg = (
            f"epoch {plan.epoch} was planned with {width} write partitions (keep_partitioning), "
            f"but the replayed batch has {actual} input partitions; read it with the same "
            "source settings (e.g. minPartitions) until the epoch has committed"
        )
        raise PlanMismatchError(msg)
