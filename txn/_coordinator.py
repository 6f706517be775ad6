"""The driver-side coordinator: plans epochs, logs decisions, finishes and recovers them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Generic

from txn._errors import TxnCode, TxnError
from txn._history import EpochHistory
from txn._log import EpochLog
from txn._model import (
    CommitMode,
    EpochCompletion,
    EpochDecision,
    EpochPlan,
    Guarantee,
    PartitionOutcome,
    PartitionReport,
    Resource,
    Rows,
)
from txn._offsets import InputOffsets
from txn._outcome import DONE, READY, EpochResult, RecoveryReport, blame, lost_error
from txn._planning import PlanSettings, check_int, check_pinned, next_plan
from txn._settle import settle_previous
from txn._state import EpochState
from txn._steps import CoordinatorStep

Execute = Callable[[EpochPlan], Sequence[PartitionReport]]
CoordinatorHooks = Callable[[CoordinatorStep, int], None]


class Coordinator(Generic[Rows]):
    """Runs the epoch protocol for one sink over a durable :class:`~txn.EpochLog`.

    Call :meth:`recover` once at start-up (before any epoch), then :meth:`run_epoch` per
    micro-batch. One coordinator per sink at a time (the log enforces it).
    """

    def __init__(
        self,
        log: EpochLog,
        resource: Resource[Rows],
        *,
        sink_id: str,
        guarantee: Guarantee | str = Guarantee.EXACTLY_ONCE,
        mode: CommitMode | str = CommitMode.ALIGNED,
        hooks: CoordinatorHooks | None = None,
    ) -> None:
        if not isinstance(sink_id, str) or not sink_id:
            msg = f"sink_id must be a non-empty string, got {sink_id!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        if log.sink_id != sink_id:
            msg = f"the epoch log belongs to sink {log.sink_id!r}, the coordinator to {sink_id!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        self._log = log
        self._resource = resource
        self._sink_id = sink_id
        self._settings = PlanSettings(sink_id, Guarantee.parse(guarantee), CommitMode.parse(mode))
        self._hooks = hooks

    @property
    def guarantee(self) -> Guarantee:
        """The delivery guarantee new epochs are planned with."""
        return self._settings.guarantee

    @property
    def mode(self) -> CommitMode:
        """The commit mode new epochs are planned with."""
        return self._settings.mode

    def _hook(self, step: CoordinatorStep, epoch: int) -> None:
        if self._hooks is not None:
            self._hooks(step, epoch)

    # -- recovery ------------------------------------------------------------------------
    def recover(self) -> RecoveryReport:
        """Resolve in-doubt epochs after a (re)start; call before the first epoch.

        The steps of docs/architecture.md, section 2, "Driver side: `Coordinator.recover()`"
        (each epoch in doubt by the kinds of its partitions, then the lingering work).
        """
        history = self._log.load()
        committed: list[int] = []
        rolled_back: list[int] = []
        waiting: list[int] = []
        for plan in history.in_doubt():
            completable = self._completable(plan)
            decided = history.state(plan.epoch) is EpochState.COMMIT_DECIDED
            if not completable:  # Step 1 (commit-in-task): left for the replay
                waiting.append(plan.epoch)
            elif len(completable) < plan.parallelism and not decided:
                # Step 2 (mixed, no decision logged): rolled back, left for the replay
                self._deliver(plan, commit=False)
                waiting.append(plan.epoch)
            else:
                # Step 3 (coordinator-completable, or mixed with a decision): finished as
                # the log says (lost prepared work: left for the replay)
                finished = self._finish_in_doubt(plan, history)
                out = waiting if finished is None else committed if finished else rolled_back
                out.append(plan.epoch)
        # Step 4 (abort lingering work): no task runs yet, so any work left is dead.
        lingering = tuple(range(history.max_parallelism()))
        if lingering:
            self._resource.abort_lingering(lingering)
        return RecoveryReport(
            committed=tuple(committed),
            rolled_back=tuple(rolled_back),
            awaiting_replay=tuple(waiting),
            lingering_partitions=lingering,
        )

    def _finish_in_doubt(self, plan: EpochPlan, history: EpochHistory) -> bool | None:
        """Finish an in-doubt epoch of a coordinator-completable resource.

        Returns True if committed, False if rolled back, None if a commit decision met lost
        prepared work (the decision stays logged; the replay redoes those partitions).
        """
        state = history.state(plan.epoch)
        commit = state is EpochState.COMMIT_DECIDED
        if self._deliver(plan, commit=commit):
            return None
        self._log.append(EpochCompletion(self._sink_id, plan.epoch, committed=commit))
        self._hook(CoordinatorStep.COMPLETED, plan.epoch)
        return commit

    def _completable(self, plan: EpochPlan) -> tuple[int, ...]:
        """Partitions of ``plan`` whose prepared work the coordinator completes."""
        try:
            return tuple(p for p in range(plan.parallelism) if self._resource.completes(p))
        except TxnError as exc:  # a composite whose split of partitions changed
            if exc.code is TxnCode.CONFIG:
                self._check_pinned(plan)
            raise

    def _deliver(self, plan: EpochPlan, *, commit: bool) -> tuple[int, ...]:
        """Commit or roll back every completable partition; return those whose work was lost.

        A commit that meets neither the prepared work nor a marker of the epoch
        (``TxnCode.PREPARED_WORK_LOST``) does not stop the others: the commit decision
        holds, and the replay redoes the returned partitions under a redo plan.
        """
        lost: list[int] = []
        for partition in self._completable(plan):
            if commit:
                try:
                    self._resource.commit_prepared(plan, partition)
                except TxnError as exc:
                    if exc.code is not TxnCode.PREPARED_WORK_LOST:
                        raise
                    lost.append(partition)
            else:
                self._resource.rollback_prepared(plan, partition)
            self._hook(CoordinatorStep.PARTITION_DELIVERED, plan.epoch)
        self._hook(CoordinatorStep.DELIVERED, plan.epoch)
        return tuple(lost)

    # -- one epoch -----------------------------------------------------------------------
    def run_epoch(
        self,
        epoch: int,
        parallelism: int,
        execute: Execute,
        *,
        input_offsets: InputOffsets | None = None,
    ) -> EpochResult:
        """Run (or skip, or finish) epoch ``epoch`` (docs/architecture.md, section 2).

        A committed epoch is skipped; an in-doubt one is finished from the log
        (coordinator-completable) or retried with its pinned plan (``parallelism`` is then
        ignored); a commit decision whose prepared work was lost on some partitions is
        redone under a pinned redo plan that keeps the decision (only commit can follow);
        the plan is logged before ``execute(plan)`` runs the write stage, and the
        completion only after every partition's effect is durable. ``input_offsets``: the
        epoch's input (carried by the plan, committed with it); a retry keeps its plan's.

        Raises:
            TxnCode.CONFIG: ``epoch`` or ``parallelism`` is invalid.
            TxnCode.PLAN_MISMATCH: an in-doubt epoch meets another sink configuration, or
                other input offsets (the replay is not the batch that was planned).
            TxnCode.EPOCH_ABORTED: the epoch did not commit; retry (replay) it.
            Exception: anything ``execute`` raises; the epoch stays in doubt.

        """
        check_int("epoch", epoch, 0)
        check_int("parallelism", parallelism, 1)
        # Step 1 (load the history): a committed epoch is skipped.
        history = self._log.load()
        if history.is_committed(epoch):
            return EpochResult(epoch=epoch, plan=history.plan(epoch), skipped=True, committed=True)
        # The epoch before lost its deferred completion in a crash: settled by its markers.
        settled = settle_previous(history, self._resource, epoch)
        if settled is not None:
            self._log.append_deferred(settled)  # written with this epoch's plan
            history = self._log.load()
        # Step 2 (resolve an epoch in doubt): finished from the log or re-planned pinned.
        previous = history.plan(epoch)
        if previous is not None and history.state(epoch).in_doubt:
            if self._resolve_in_doubt(previous, history):
                return EpochResult(epoch=epoch, plan=previous, skipped=True, committed=True)
            history = self._log.load()
        fingerprint = self._resource.fingerprint
        plan = next_plan(self._settings, epoch, parallelism, history, input_offsets, fingerprint)
        # Step 3 (abort beyond a shrunk parallelism): the dropped partitions' lingering work.
        self._abort_dropped(plan, history)
        # Step 4 (log the plan): before any task runs (with a deferred completion).
        self._hook(CoordinatorStep.BEFORE_PLAN, epoch)
        self._log.append(plan)
        self._hook(CoordinatorStep.PLAN_LOGGED, epoch)
        # Step 5 (at-most-once: complete first): then the write stage runs.
        if plan.guarantee is Guarantee.AT_MOST_ONCE:
            return self._run_at_most_once(plan, execute)
        # Step 6 (run the write stage): one report per partition.
        redo = history.state(epoch) is EpochState.COMMIT_DECIDED  # "Lost prepared work"
        completable = self._completable(plan)
        reports = self._run_stage(plan, execute, completable, redo=redo)
        # Steps 7 (decide, coordinator-completable) and 8 (decide, commit-in-task).
        if redo:
            return self._complete_redo(plan, reports)
        if len(completable) == plan.parallelism:
            return self._complete_two_phase(plan, reports)
        if completable:
            return self._complete_mixed(plan, reports, completable)
        return self._complete_in_task(plan, reports)

    def _resolve_in_doubt(self, previous: EpochPlan, history: EpochHistory) -> bool:
        """Step 2 of :meth:`run_epoch`; True if the in-doubt epoch got committed from the log.

        Otherwise the epoch is re-planned pinned: commit-in-task, a mixed epoch without a
        decision (its prepared partitions are rolled back first), or a commit decision that
        met lost prepared work (the redo plan of "Lost prepared work").
        """
        completable = self._completable(previous)
        decided = history.state(previous.epoch) is EpochState.COMMIT_DECIDED
        if completable and (len(completable) == previous.parallelism or decided):
            finished = self._finish_in_doubt(previous, history)
            if finished is None:  # lost prepared work: redone under a pinned redo plan
                self._check_pinned(previous)
            return bool(finished)
        self._check_pinned(previous)  # commit-in-task, or mixed undecided: redone, pinned
        if completable:
            self._deliver(previous, commit=False)
        return False

    def _abort_dropped(self, plan: EpochPlan, history: EpochHistory) -> None:
        """Step 3 of :meth:`run_epoch`: abort lingering work beyond a shrunk parallelism."""
        latest = history.latest_plan()
        if latest is not None and latest.parallelism > plan.parallelism:
            self._resource.abort_lingering(range(plan.parallelism, history.max_parallelism()))

    def _run_stage(
        self, plan: EpochPlan, execute: Execute, completable: tuple[int, ...], *, redo: bool
    ) -> tuple[PartitionReport, ...]:
        """Step 6 of :meth:`run_epoch`: ``execute(plan)``; a failure propagates, in doubt.

        Prepared work is released at once as decided (a redo plan commits it, anything else
        rolls it back), as recovery would.
        """
        try:
            reports = self._execute(plan, execute)
        except Exception:
            if completable:
                with contextlib.suppress(Exception):  # best effort; never mask the failure
                    self._deliver(plan, commit=redo)
            raise
        self._hook(CoordinatorStep.REPORTS_RECEIVED, plan.epoch)
        return reports

    def _check_pinned(self, previous: EpochPlan) -> None:
        check_pinned(previous, self._settings, self._resource.fingerprint())

    def _execute(self, plan: EpochPlan, execute: Execute) -> tuple[PartitionReport, ...]:
        """Run the write stage; return its reports, checked: one per partition, in order."""
        returned = execute(plan)
        self._hook(CoordinatorStep.STAGE_RETURNED, plan.epoch)
        reports = tuple(sorted(returned, key=lambda r: r.partition))
        if [r.partition for r in reports] != list(range(plan.parallelism)) or any(
            r.epoch != plan.epoch for r in reports
        ):
            msg = (
                f"epoch {plan.epoch}: the write stage returned reports for partitions "
                f"{[(r.epoch, r.partition) for r in reports]}, want one per partition "
                f"0..{plan.parallelism - 1}; the execute callable is broken"
            )
            raise TxnError(msg, code=TxnCode.PARTICIPANT)
        return reports

    def _run_at_most_once(self, plan: EpochPlan, execute: Execute) -> EpochResult:
        self._log.append(EpochCompletion(self._sink_id, plan.epoch, committed=True))
        self._hook(CoordinatorStep.COMPLETED, plan.epoch)
        reports = self._execute(plan, execute)
        self._hook(CoordinatorStep.REPORTS_RECEIVED, plan.epoch)
        for report in reports:
            if report.outcome is PartitionOutcome.PREPARED:
                self._resource.commit_prepared(plan, report.partition)
        return EpochResult(
            epoch=plan.epoch, plan=plan, skipped=False, committed=True, reports=reports
        )

    def _complete_two_phase(
        self, plan: EpochPlan, reports: tuple[PartitionReport, ...]
    ) -> EpochResult:
        commit = all(r.outcome in READY for r in reports)
        return self._decide(plan, reports, commit)

    def _decide(
        self, plan: EpochPlan, reports: tuple[PartitionReport, ...], commit: bool
    ) -> EpochResult:
        """Log the decision, deliver it to the completable partitions, log the completion."""
        reason = "" if commit else blame(reports)
        self._log.append(
            EpochDecision(sink_id=self._sink_id, epoch=plan.epoch, commit=commit, reason=reason)
        )
        self._hook(CoordinatorStep.DECISION_LOGGED, plan.epoch)
        lost = self._deliver(plan, commit=commit)
        if lost:
            raise lost_error(plan, lost)
        self._log.append(EpochCompletion(self._sink_id, plan.epoch, committed=commit))
        self._hook(CoordinatorStep.COMPLETED, plan.epoch)
        if not commit:
            msg = f"epoch {plan.epoch} was rolled back ({reason}); replay it to retry"
            raise TxnError(msg, code=TxnCode.EPOCH_ABORTED)
        return EpochResult(
            epoch=plan.epoch, plan=plan, skipped=False, committed=True, reports=reports
        )

    def _complete_mixed(
        self, plan: EpochPlan, reports: tuple[PartitionReport, ...], completable: tuple[int, ...]
    ) -> EpochResult:
        """Commit the prepared partitions only once every commit-in-task one has committed.

        Otherwise no decision is logged: the prepared work is rolled back and the epoch stays
        in doubt, pinned, for the replay (which skips what committed in the tasks).
        """
        prepared = set(completable)
        ready = all(r.outcome in (READY if r.partition in prepared else DONE) for r in reports)
        if not ready:
            self._deliver(plan, commit=False)
            msg = (
                f"epoch {plan.epoch} did not commit on every partition ({blame(reports)}); its "
                "prepared partitions were rolled back, it stays in doubt and the replay redoes "
                "the missing partitions"
            )
            raise TxnError(msg, code=TxnCode.EPOCH_ABORTED)
        return self._decide(plan, reports, commit=True)

    def _complete_redo(self, plan: EpochPlan, reports: tuple[PartitionReport, ...]) -> EpochResult:
        """Commit a redo plan's prepared work (decided already); complete unless some is missing."""
        lost = self._deliver(plan, commit=True)
        failed = [r for r in reports if r.outcome not in READY and r.outcome not in DONE]
        if lost or failed:
            why = blame(failed) if failed else ""
            raise lost_error(plan, tuple(sorted({*lost, *(r.partition for r in failed)})), why)
        self._log.append(EpochCompletion(self._sink_id, plan.epoch, committed=True))
        self._hook(CoordinatorStep.COMPLETED, plan.epoch)
        return EpochResult(
            epoch=plan.epoch, plan=plan, skipped=False, committed=True, reports=reports
        )

    def _complete_in_task(
        self, plan: EpochPlan, reports: tuple[PartitionReport, ...]
    ) -> EpochResult:
        if not all(r.outcome in DONE for r in reports):
            msg = (
                f"epoch {plan.epoch} did not commit on every partition ({blame(reports)}); it "
                "stays in doubt and the replay redoes the missing partitions"
            )
            raise TxnError(msg, code=TxnCode.EPOCH_ABORTED)
        completion = EpochCompletion(self._sink_id, plan.epoch, committed=True)
        if plan.guarantee is Guarantee.EXACTLY_ONCE and self._resource.reads_markers:
            self._log.append_deferred(completion)  # "Deferred completion": with the next plan
        else:
            self._log.append(completion)
        self._hook(CoordinatorStep.COMPLETED, plan.epoch)
        return EpochResult(
            epoch=plan.epoch, plan=plan, skipped=False, committed=True, reports=reports
        )
