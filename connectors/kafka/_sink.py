"""``KafkaSink``: the exactly-once Kafka sink for ``foreachBatch``."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from connectors.kafka._config import DEFAULT_STAGE_RETRIES, DEFAULT_VOTE_CHANNEL, SinkConfig
from connectors.kafka._epoch_log import KafkaEpochLog
from connectors.kafka._errors import InputError, InsufficientSlotsError, PreflightError
from connectors.kafka._faults import FaultPlan
from connectors.kafka._participant import KafkaResource
from connectors.kafka._stage import TaskSpec, input_layout, prepare, run_write_stage
from connectors.kafka._topics import admin_client, broker_config, ensure_topics, existing_topics
from connectors.kafka._votes import VoteServer, server_hosts
from connectors.kafka._writer import Layout
from txn import (
    CommitMode,
    Coordinator,
    CoordinatorStep,
    EpochHistory,
    EpochLog,
    EpochPlan,
    EpochResult,
    FileEpochLog,
    Guarantee,
    NonDeterministicReplayError,
    PartitionReport,
)

log = logging.getLogger("connectors.kafka")


def _new_generation() -> str:
    return uuid.uuid4().hex

# Fraction of transaction_timeout_ms an epoch's write stage may take before the sink
# warns: beyond it a slower batch risks being aborted by the broker's timeout.
TIMEOUT_WARN_FRACTION = 0.5
_DRIVER_FAULT_STEPS = {
    CoordinatorStep.PLAN_LOGGED: "driver_after_plan",
    CoordinatorStep.REPORTS_RECEIVED: "driver_before_complete",
}


class KafkaSink:
    """Exactly-once (or at-least-once / at-most-once) Kafka sink for ``foreachBatch``.

    Usage::

        sink = KafkaSink("broker:9092", "out", sink_id="orders-eos")
        df.writeStream.foreachBatch(sink).option("checkpointLocation", ck).start()

    Protocol of one call ``sink(df, batch_id)`` (epoch N = batch_id):

    1. check the input columns (typed error, nothing written); on the first call run
       :meth:`preflight` and recover (abort lingering transactions of the sink);
    2. the coordinator reads the epoch log: a committed N returns at once (replay);
       an in-doubt N reuses its pinned parallelism; otherwise P is chosen (aligned:
       checked against the task slots) and the plan is logged durably;
    3. the write stage runs one Spark task per write partition; each task fences older
       producers of ``{sink_id}-{p}`` (or, first attempts only, reuses its worker's
       pooled producer of the current client generation, see ``_participant``), skips
       if its marker shows N committed, else
       writes its rows and the marker in one Kafka transaction and pre-commits;
       aligned: all votes are gathered (by the driver's vote server, started on the
       first aligned epoch, or Spark's allGather) and every task commits only if all
       voted yes; unaligned: each task commits at once; a failed stage is re-run up to
       ``stage_retries`` times;
    4. when every partition committed, N is logged complete.

    Construction validates every option without network I/O.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str | None,
        sink_id: str,
        *,
        guarantee: str | Guarantee = "exactly-once",
        mode: str | CommitMode = "aligned",
        parallelism: int | None = None,
        epoch_log: str | os.PathLike[str] | None = None,
        epoch_log_topic: str = "eos-epoch-log",
        marker_topic: str = "eos-markers",
        create_topics: bool = False,
        transaction_timeout_ms: int = 60_000,
        producer_config: Mapping[str, Any] | None = None,
        changelog: bool = False,
        order_by: Sequence[str] = (),
        fault_plan: FaultPlan | None = None,
        stage_retries: int = DEFAULT_STAGE_RETRIES,
        vote_channel: str = DEFAULT_VOTE_CHANNEL,
    ) -> None:
        self._cfg = SinkConfig.build(
            bootstrap_servers=bootstrap_servers, topic=topic, sink_id=sink_id,
            guarantee=guarantee, mode=mode, parallelism=parallelism, epoch_log=epoch_log,
            epoch_log_topic=epoch_log_topic, marker_topic=marker_topic,
            create_topics=create_topics, transaction_timeout_ms=transaction_timeout_ms,
            producer_config=producer_config, changelog=changelog, order_by=order_by,
            fault_plan=fault_plan, stage_retries=stage_retries, vote_channel=vote_channel,
        )
        self._lock = threading.Lock()
        self._log: EpochLog | None = None
        self._votes: VoteServer | None = None
        self._preflight_done = False
        self._recovered = False
        self._generation = _new_generation()
        self._last_parallelism: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark Connect pickles the foreachBatch function: ship the config only; the
        # receiving process opens its own log, runs its own preflight and recovery.
        return {"cfg": self._cfg}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._cfg = state["cfg"]
        self._lock = threading.Lock()
        self._log = None
        self._votes = None
        self._preflight_done = False
        self._recovered = False
        self._generation = _new_generation()
        self._last_parallelism = None

    @property
    def config(self) -> SinkConfig:
        """The validated configuration."""
        return self._cfg

    # -- foreachBatch entry points -------------------------------------------------------
    def __call__(self, df: Any, batch_id: int) -> EpochResult:
        """``foreachBatch`` callable: same as :meth:`write`."""
        return self.write(df, batch_id)

    def write(self, df: Any, batch_id: int) -> EpochResult:
        """Write micro-batch ``batch_id`` of ``df`` (see the class docstring for the steps)."""
        layout = input_layout(df.schema, self._cfg)
        with self._lock:
            if not self._preflight_done:
                self.preflight()
            coordinator = self._coordinator(layout)
            if not self._recovered:
                self._new_client_generation()  # recovery fences every id it touches
                report = coordinator.recover()
                self._recovered = True
                log.info("sink %s recovered: %s", self._cfg.sink_id, report)
            parallelism = self._parallelism(df)
            if self._aligned(self._cfg.guarantee, self._cfg.mode):
                self._check_slots(df, parallelism)
                self._vote_server(df)  # started before the plan is logged: fail early
            started = time.monotonic()
            try:
                result = coordinator.run_epoch(
                    batch_id, parallelism, lambda plan: self._execute(df, layout, plan)
                )
            except BaseException:
                self._new_client_generation()  # retries may have fenced pooled producers
                raise
            self._check_duration(batch_id, time.monotonic() - started, result)
            return result

    # -- steps -------------------------------------------------------------------------
    def preflight(self) -> None:
        """Check the cluster (network I/O; runs lazily on the first write).

        1. the broker answers; 2. the output topic exists (created when
        ``create_topics=True``); the marker topic is created if missing (exactly-once);
        3. ``transaction_timeout_ms`` is at most the broker's
        ``transaction.max.timeout.ms``.

        Raises:
            PreflightError: with what to fix.

        """
        cfg = self._cfg
        topics = existing_topics(admin_client(cfg.bootstrap_servers))
        if cfg.topic is not None and cfg.topic not in topics:
            if not cfg.create_topics:
                msg = (
                    f"output topic {cfg.topic!r} does not exist; create it or pass "
                    "create_topics=True"
                )
                raise PreflightError(msg)
            ensure_topics(cfg.bootstrap_servers, [cfg.topic])
        if cfg.transactional:
            ensure_topics(cfg.bootstrap_servers, [cfg.marker_topic])
            self._check_timeout_limit()
        self._preflight_done = True

    def _check_timeout_limit(self) -> None:
        cfg = self._cfg
        raw = broker_config(cfg.bootstrap_servers, "transaction.max.timeout.ms")
        if raw is None:
            log.warning("broker does not report transaction.max.timeout.ms; not checked")
            return
        if cfg.transaction_timeout_ms > int(raw):
            msg = (
                f"transaction_timeout_ms={cfg.transaction_timeout_ms} exceeds the broker's "
                f"transaction.max.timeout.ms={raw}; lower transaction_timeout_ms or raise "
                "the broker setting"
            )
            raise PreflightError(msg)

    def _open_log(self) -> EpochLog:
        if self._log is None:
            cfg = self._cfg
            if cfg.epoch_log is not None:
                self._log = FileEpochLog(cfg.epoch_log, sink_id=cfg.sink_id)
            else:
                self._log = KafkaEpochLog(
                    cfg.bootstrap_servers, cfg.sink_id, topic=cfg.epoch_log_topic
                )
        return self._log

    def _coordinator(self, layout: Layout) -> Coordinator[Any]:
        cfg = self._cfg
        mode = cfg.mode if cfg.transactional else CommitMode.UNALIGNED
        return Coordinator(
            self._open_log(), KafkaResource(cfg, layout), sink_id=cfg.sink_id,
            guarantee=cfg.guarantee, mode=mode, hooks=self._driver_hook,
        )

    def _driver_hook(self, step: CoordinatorStep, epoch: int) -> None:
        name = _DRIVER_FAULT_STEPS.get(step)
        if self._cfg.fault_plan is not None and name is not None:
            self._cfg.fault_plan.fire(name, epoch)

    def _parallelism(self, df: Any) -> int:
        cfg = self._cfg
        if cfg.parallelism is not None:
            return cfg.parallelism
        return max(1, int(df.sparkSession.sparkContext.defaultParallelism))

    @staticmethod
    def _aligned(guarantee: Guarantee, mode: CommitMode) -> bool:
        return guarantee is Guarantee.EXACTLY_ONCE and mode is CommitMode.ALIGNED

    def _check_slots(self, df: Any, parallelism: int) -> None:
        sc = df.sparkSession.sparkContext
        cpus = int(sc.getConf().get("spark.task.cpus", "1"))
        slots = max(1, int(sc.defaultParallelism) // max(1, cpus))
        if parallelism > slots:
            msg = (
                f"aligned mode runs all {parallelism} write tasks of an epoch at once, but "
                f"Spark has only {slots} task slot(s); use mode='unaligned' or "
                f"parallelism<={slots} (an in-doubt epoch keeps the parallelism it was "
                "planned with: give the cluster enough slots until it has committed)"
            )
            raise InsufficientSlotsError(msg)

    def _vote_server(self, df: Any) -> VoteServer | None:
        """Return the running vote server (started now if needed); None for "barrier"."""
        if self._cfg.vote_channel != "driver":
            return None
        if self._votes is None or not self._votes.running:
            sc = df.sparkSession.sparkContext
            conf = sc.getConf()
            bind, advertise = server_hosts(str(sc.master), lambda key: conf.get(key, None))
            self._votes = VoteServer(bind, advertise).start()
        return self._votes

    def _execute(self, df: Any, layout: Layout, plan: EpochPlan) -> list[PartitionReport]:
        aligned = self._aligned(plan.guarantee, plan.mode)
        if aligned:  # again: an in-doubt epoch keeps the parallelism it was planned with
            self._check_slots(df, plan.parallelism)
        if plan.parallelism != self._last_parallelism:
            self._new_client_generation()  # a shrink's abort_lingering fenced ids >= P
            self._last_parallelism = plan.parallelism
        prepared = prepare(df, self._cfg, layout, plan.parallelism)
        resource = KafkaResource(self._cfg, layout, generation=self._generation)
        spec = TaskSpec(resource, plan, aligned)
        votes = self._vote_server(df) if aligned else None
        reports = self._run_stage_with_retries(prepared, spec, votes)
        if self._cfg.fault_plan is not None:
            self._cfg.fault_plan.fire("driver_after_stage", plan.epoch)
        return reports

    def _run_stage_with_retries(
        self, prepared: Any, spec: TaskSpec, votes: VoteServer | None
    ) -> list[PartitionReport]:
        """Run the write stage; re-run it up to ``stage_retries`` times after a failure.

        Re-running is safe: each task fences the previous attempt's producer and skips
        by marker what already committed. Spark itself cannot retry a failed barrier
        result stage, so in aligned mode this is the only retry within one call.
        Deterministic errors (bad input, non-deterministic replay) are never retried.
        With the driver vote channel each run is its own vote round (stage attempt
        ``attempt``, fresh token), closed when the run ends.
        """
        attempt = 0
        while True:
            resource = replace(spec.resource, generation=self._generation)
            run = replace(spec, resource=resource, stage_attempt=attempt)
            try:
                if votes is None:
                    return run_write_stage(prepared, run, self._new_client_generation)
                with votes.voting(spec.plan, attempt) as ticket:
                    return run_write_stage(
                        prepared, replace(run, votes=ticket), self._new_client_generation
                    )
            except (InputError, NonDeterministicReplayError):
                raise
            except Exception as exc:
                if attempt >= self._cfg.stage_retries:
                    raise
                attempt += 1
                self._new_client_generation()  # the re-run's new producers fence the old
                log.warning(
                    "epoch %d write stage failed (%s: %s); re-running it (retry %d of %d)",
                    spec.plan.epoch, type(exc).__name__, str(exc)[:300], attempt,
                    self._cfg.stage_retries,
                )

    def _new_client_generation(self) -> None:
        """Stop write tasks from reusing producers pooled before now.

        Called whenever producers of the sink's ids may have been fenced by an instance
        the pooled ones do not know of: recovery, a failed epoch, a stage re-run, a Spark
        task retry, a change of parallelism. Producers created from now on are pooled
        under the new generation.
        """
        self._generation = _new_generation()

    def _check_duration(self, epoch: int, seconds: float, result: EpochResult) -> None:
        limit = self._cfg.transaction_timeout_ms / 1000.0
        if not result.skipped and self._cfg.transactional and seconds > limit * TIMEOUT_WARN_FRACTION:
            log.warning(
                "epoch %d took %.1fs, more than %d%% of transaction_timeout_ms (%.0fs): a "
                "slower batch risks a broker-side abort (the epoch is then redone); raise "
                "transaction_timeout_ms or shorten the trigger interval",
                epoch, seconds, int(TIMEOUT_WARN_FRACTION * 100), limit,
            )

    # -- introspection -----------------------------------------------------------------
    def epoch_log_history(self) -> EpochHistory:
        """Return the sink's epoch log as folded history (reads; never fences a running sink)."""
        with self._lock:
            return self._open_log().load()

    def close(self) -> None:
        """Release the epoch log and stop the vote server. Idempotent."""
        with self._lock:
            if self._votes is not None:
                self._votes.close()
                self._votes = None
            if self._log is not None:
                self._log.close()
                self._log = None
                self._recovered = False
