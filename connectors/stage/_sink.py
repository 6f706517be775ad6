"""``TransactionalSink``: any connector on the generic stage as a ``foreachBatch`` callable."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from connectors.stage import _hooks
from connectors.stage._backchannel import BackChannels, StageEvent
from connectors.stage._binding import QueryBinder, QueryIdentity
from connectors.stage._connector import SinkConnector
from connectors.stage._errors import StageCode, StageError
from connectors.stage._execute import EpochExecution
from connectors.stage._input import InputSpec
from connectors.stage._lifecycle import RunningQuery, SinkLifecycle, take_over
from connectors.stage._metrics import CountingLog, EpochMetrics, EpochRecorder, MetricsBook
from connectors.stage._offsets import batch_input
from connectors.stage._options import StageOptions
from connectors.stage._resume import ResumePoint, bind_resumed, resume_point
from connectors.stage._shares import EpochShape, member_width, shape_epoch
from connectors.stage._slots import check_slots, default_parallelism
from connectors.stage._votes import VoteServer, server_hosts
from txn import (
    CompositeResource,
    Coordinator,
    CoordinatorStep,
    EpochHistory,
    EpochLog,
    EpochResult,
    Guarantee,
    Resource,
    TxnError,
    can_retry_stage,
    has_code,
)
from txn._composite import Member
from txn._deferred import DeferredCompletionLog
from txn._settle import settle_in_doubt

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

    from connectors.stage._slots import Spark

log = logging.getLogger("connectors.stage")


def needs_user_action(exc: BaseException) -> bool:
    """Whether ``exc`` is an error no re-run fixes and the user must act on.

    A :class:`txn.TxnError` that refuses a stage re-run (``retry_stage`` False: a sink in
    use, another query's log, a bad schema or option), except a planned stop
    (``StageCode.SINK_STOPPED``, raised after :meth:`TransactionalSink.stop_gracefully`).
    """
    return (
        isinstance(exc, TxnError)
        and not can_retry_stage(exc)
        and not has_code(exc, StageCode.SINK_STOPPED)
    )


# Seconds stop_gracefully waits by default for the epoch in flight to commit.
STOP_TIMEOUT_S = 300.0

Select = Callable[["DataFrame"], "DataFrame"]  # a member's rows from the micro-batch


@dataclass(frozen=True)
class _Member:
    """A connector of the sink and how it gets its rows from the micro-batch."""

    connector: SinkConnector
    select: Select | None = None

    def frame(self, df: DataFrame) -> DataFrame:
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

    # A composite whose ``mode`` was not given may run an epoch unaligned (``_shares``).
    _auto_mode = False

    def __init__(self, connector: SinkConnector) -> None:
        connector.check_options()
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
        self._channels = BackChannels([m.connector.back_channel() for m in self._members])
        self._binder = QueryBinder(self._sink_id, start_over=self._options.start_over)
        self._identity = QueryIdentity(self._options.checkpoint_location)
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
    def __call__(self, df: DataFrame, batch_id: int) -> EpochResult:
        """``foreachBatch`` callable: same as :meth:`write`."""
        return self.write(df, batch_id)

    def write(self, df: DataFrame, batch_id: int) -> EpochResult:
        """Write micro-batch ``batch_id`` of ``df`` (docs/architecture.md, section 9, steps 1-5).

        An error the user must act on (:func:`needs_user_action`) is also logged as one
        ERROR line starting with its class and message: Spark shows a ``foreachBatch``
        error inside its own Py4J trace, where the message comes last.

        Raises:
            StageCode.SINK_STOPPED: :meth:`stop_gracefully` was called; nothing of the batch is
                written and Spark replays it on the next start.

        """
        try:
            return self._write(df, batch_id)
        except Exception as exc:
            if needs_user_action(exc):
                log.error(
                    "%s: %s (sink %r, batch %d)", type(exc).__name__, exc, self._sink_id, batch_id
                )
            raise

    def _write(self, df: DataFrame, batch_id: int) -> EpochResult:
        self._refuse_if_stopping(batch_id)
        frames = [m.frame(df) for m in self._members]
        # Step 1: check the input; a bad schema raises before anything is logged or written.
        input_specs = [
            m.connector.check_input(f.schema) for m, f in zip(self._members, frames, strict=True)
        ]
        with self._lock:
            self._refuse_if_stopping(batch_id)
            # Which query writes (the binding, ``_binding``): refused before anything is logged.
            query_id = self._identity.of(df, connect=_spark_context(df) is None)
            if query_id is not None:
                self._query = RunningQuery(query_id, df.sparkSession)
            recorder = EpochRecorder(sink_id=self._sink_id, batch_id=batch_id, query_id=query_id)
            appends_before = self._open_log().appends  # step 2 opens the log on the first call
            try:
                result = self._write_locked(frames, input_specs, query_id, batch_id, recorder)
            except BaseException as exc:
                # Step 5: a failed epoch is told to the back channels and propagates.
                self._channels.event(StageEvent.FAILED_EPOCH)
                self._record(recorder.finish(None, self._open_log().appends - appends_before, exc))
                raise
            self._record(recorder.finish(result, self._open_log().appends - appends_before))
            return result

    def _refuse_if_stopping(self, batch_id: int) -> None:
        if self._stopping.is_set():
            msg = (
                f"sink {self._sink_id!r} is stopping; batch {batch_id} was not "
                "written and is replayed when the query starts again"
            )
            raise StageError(msg, code=StageCode.SINK_STOPPED)

    def _write_locked(
        self,
        frames: list[DataFrame],
        input_specs: list[InputSpec],
        query_id: str | None,
        batch_id: int,
        recorder: EpochRecorder,
    ) -> EpochResult:
        # Step 2 (first call): the epoch log is open; preflight, then recovery below.
        self._preflight()
        spark = _spark(frames[0])
        resources = [
            m.connector.resource(p) for m, p in zip(self._members, input_specs, strict=True)
        ]
        shape = self._shape(frames, resources, spark)  # each member's tasks, the epoch's mode
        resource = _resource(resources, shape.widths)
        coordinator = self._coordinator(resource, shape.options)
        self._recover(coordinator)
        batch = batch_input(frames[0], query_id, batch_id)  # the input offsets (no Spark job)
        resume = None
        if self._options.resume is not None:
            resume = functools.partial(bind_resumed, self._open_log(), resource, batch)
        epoch = self._binder.epoch(self._open_log(), query_id, batch_id, resume)  # the binding
        recorder.epoch = epoch
        parallelism = sum(shape.widths)
        # Step 3: aligned: the plan must fit the free task slots; the vote server starts.
        shape.check()  # a composite's slot error, naming the member to change
        self._reserve(spark, parallelism, shape.options)
        for member, spec in zip(self._members, input_specs, strict=True):
            member.connector.before_plan(spec)  # e.g. DDL the rows need, before the plan
        # Step 4: the coordinator runs the epoch; ``execute`` routes and runs the write stage.
        execute = EpochExecution(
            options=self._options,
            connectors=[m.connector for m in self._members],
            frames=frames,
            input_specs=input_specs,
            resource=resource,
            channels=self._channels,
            recorder=recorder,
            spark=spark,
            vote_server=self._vote_server,
            sink_id=self._sink_id,
        )
        return coordinator.run_epoch(epoch, parallelism, execute, input_offsets=batch)

    def _preflight(self) -> None:
        if not self._preflight_done:
            for member in self._members:
                member.connector.preflight()
            self._preflight_done = True

    def _recover(self, coordinator: Coordinator[Any]) -> None:
        if not self._recovered:
            self._channels.event(StageEvent.RECOVERY)
            report = coordinator.recover()
            self._recovered = True
            log.info("sink %s recovered: %s", self._sink_id, report)

    def _shape(
        self, frames: list[DataFrame], resources: list[Resource[Any]], spark: Spark
    ) -> EpochShape:
        """Each member's write tasks and the epoch's options (``_shares``)."""
        widths = [
            member_width(m.connector.sink_id, m.connector.options, f)
            for m, f in zip(self._members, frames, strict=True)
        ]
        shared = any(w.tasks is None for w in widths)
        default = 0
        if shared and not (len(widths) > 1 and self._options.parallelism):
            default = default_parallelism(spark)
        if len(widths) == 1 or not shared:
            return shape_epoch(self._options, widths, default, spark, auto_mode=self._auto_mode)

        def fingerprint(split: list[int]) -> str:
            return _resource(resources, split).fingerprint()

        return shape_epoch(
            self._options,
            widths,
            default,
            spark,
            history=self._open_log().load(),
            fingerprint=fingerprint,
            auto_mode=self._auto_mode,
        )

    def _reserve(self, spark: Spark, parallelism: int, opts: StageOptions) -> None:
        if opts.aligned:
            check_slots(spark, parallelism)
        if opts.aligned or opts.guarantee is Guarantee.AT_MOST_ONCE:
            self._vote_server(spark)  # started before the plan is logged: fail early

    def _record(self, metrics: EpochMetrics) -> None:
        self._book.add(metrics)
        limit = min(
            (w for m in self._members if (w := m.connector.options.warn_after_s) is not None),
            default=None,
        )
        if (
            not metrics.skipped
            and metrics.epoch >= 0
            and limit is not None  # -1: no epoch yet
            and metrics.epoch_ms > limit * 1000.0
        ):
            log.warning(
                "epoch %d took %.1fs, more than %.0fs: a slower batch risks a transaction "
                "timeout (the epoch is then redone); raise the timeout or shorten the "
                "trigger interval",
                metrics.epoch,
                metrics.epoch_ms / 1000.0,
                limit,
            )

    # -- steps -------------------------------------------------------------------------
    def _open_log(self) -> CountingLog:
        if self._res.log is None:
            query_id = self._query.query_id if self._query is not None else None
            take_over(self._owner_key, self, query_id)  # StageCode.SINK_IN_USE: its query runs
            # One log write per epoch: the completion goes with the next plan (txn._deferred).
            self._res.log = CountingLog(DeferredCompletionLog(self._log_factory()))
        return self._res.log

    def _coordinator(self, resource: Resource[Any], opts: StageOptions) -> Coordinator[Any]:
        return Coordinator(
            self._open_log(),
            resource,
            sink_id=self._sink_id,
            guarantee=opts.guarantee,
            mode=opts.effective_mode,
            hooks=self._driver_hook,
        )

    def _driver_hook(self, step: CoordinatorStep, epoch: int) -> None:
        faults = _hooks.installed(self._sink_id)  # a test's fault plan, if one is installed
        if faults is not None:
            faults.fire(step, epoch)

    def _vote_server(self, spark: Spark) -> VoteServer | None:
        """Return the running vote server (started now if needed); None for "barrier".

        None too under Spark Connect (no SparkContext): aligned votes then go through
        ``allGather`` (the caller may be a client that executors cannot reach; Spark's
        barrier coordinator is in the server's driver), and at-most-once lets only a
        task's first attempt write.
        """
        sc = _context(spark)
        if self._options.vote_channel != "driver" or sc is None:
            return None
        if self._res.votes is None or not self._res.votes.running:
            conf = sc.getConf()
            bind, advertise = server_hosts(str(sc.master), lambda key: conf.get(key, None))
            self._res.votes = VoteServer(bind, advertise).start()
        return self._res.votes

    # -- operations ----------------------------------------------------------------------
    def metrics(self) -> tuple[EpochMetrics, ...]:
        """Return the sink's recent epochs (at most ``RECENT_EPOCHS``), oldest first."""
        return self._book.recent()

    def metrics_for(self, query_id: str | None, batch_id: int) -> EpochMetrics | None:
        """Return the metrics of ``batch_id`` of ``query_id`` (None: any query), if kept."""
        return self._book.for_batch(query_id, batch_id)

    def observe_metrics(self, observer: Callable[[EpochMetrics], None]) -> Callable[[], None]:
        """Call ``observer`` with the kept epochs' metrics, then with each new epoch's.

        Called on the driver, on the thread that ran the epoch, in order, each epoch once;
        an observer must return quickly, and one that raises is logged, never failing the
        epoch. Returns the function that removes the observer. Not pickled with the sink.
        """
        return self._book.observe(observer)

    def request_stop(self) -> None:
        """Accept no new epoch: a later call raises :class:`StageCode.SINK_STOPPED`, writing nothing."""
        self._stopping.set()

    def stop_gracefully(self, query: StreamingQuery, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """Stop ``query`` once the epoch in flight (if any) has committed.

        1. no new epoch starts (:meth:`request_stop`); a batch Spark starts meanwhile fails
           with :class:`StageCode.SINK_STOPPED` before writing anything and is replayed on the
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

    def settle_for_resume(self) -> ResumePoint:
        """Settle the log for a new query; return where its input continues (``_resume``).

        Raises ``txn.TxnCode.EPOCH_UNRESOLVED`` (an epoch in doubt is partly committed; for a
        composite sink: in doubt at all) or ``StageCode.NOT_KAFKA_INPUT``.
        """
        with self._lock:
            log = self._open_log()
            if len(self._members) == 1 and log.load().in_doubt():
                self._preflight()
                resource = self.connector.resource(InputSpec(columns=()))  # no rows: recovery
                self._recover(self._coordinator(resource, self._options))
                settle_in_doubt(log, resource)
            return resume_point(log.load())

    def epoch_log_history(self) -> EpochHistory:
        """Return the sink's epoch log as folded history (reads; never fences a running sink)."""
        with self._lock:
            return self._open_log().load()


def _spark_context(frame: DataFrame) -> SparkContext | None:
    """Return the SparkContext of ``frame``'s session, or None under Spark Connect."""
    try:
        return frame.sparkSession.sparkContext
    except (AttributeError, NotImplementedError):  # Connect: PySparkAttributeError
        return None


def _spark(frame: DataFrame) -> Spark:
    """Return what slots and defaults are read from: the SparkContext, or the Connect session."""
    sc = _spark_context(frame)
    return frame.sparkSession if sc is None else sc


def _context(spark: Spark) -> SparkContext | None:
    """Return the SparkContext of :func:`_spark`'s answer; None for a Connect session."""
    return spark if hasattr(spark, "statusTracker") else None  # type: ignore[return-value]


def _resource(resources: Sequence[Resource[Any]], widths: Sequence[int]) -> Resource[Any]:
    """One member's resource, or the composite of every member's (one epoch for all)."""
    if len(resources) == 1:
        return resources[0]
    return CompositeResource([Member(r, w) for r, w in zip(resources, widths, strict=True)])
