"""An in-process executor of the write stage: every write partition of an epoch in its own thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic

from txn._errors import TxnCode, TxnError
from txn._model import (
    GATHER_TIMEOUT_S,
    CommitMode,
    EpochPlan,
    PartitionReport,
    Resource,
    Rows,
    Vote,
)
from txn._task import TaskHooks, run_partition

VoteHook = Callable[[Vote, int], None]


class InProcessExecutor(Generic[Rows]):
    """``execute`` implementation for :meth:`~txn.Coordinator.run_epoch` using threads.

    1. one thread per partition runs :func:`~txn._task.run_partition` with
       ``rows_for(plan, partition)``;
    2. aligned mode: votes are gathered through a :class:`threading.Barrier` of
       ``plan.parallelism`` parties (the in-process twin of Spark's barrier ``allGather``);
       ``vote_hook(vote, votes_so_far)`` runs as each vote arrives (crash injection);
    3. a partition that fails breaks the barrier, so no partition waits forever;
    4. the reports are returned in partition order; if a thread raised, the exception of
       the lowest failing partition is raised instead, except that a ``BaseException``
       that is not an ``Exception`` (a simulated crash) wins, as a dead driver would.
    """

    def __init__(
        self,
        resource: Resource[Rows],
        rows_for: Callable[[EpochPlan, int], Rows],
        *,
        task_hooks: TaskHooks | None = None,
        vote_hook: VoteHook | None = None,
    ) -> None:
        self._resource = resource
        self._rows_for = rows_for
        self._task_hooks = task_hooks
        self._vote_hook = vote_hook

    def __call__(self, plan: EpochPlan) -> Sequence[PartitionReport]:
        """Run the write stage of ``plan`` and return one report per partition."""
        run = _Run(self, plan)
        threads = [
            threading.Thread(target=run.task, args=(p,), name=f"txn-{plan.epoch}-{p}")
            for p in range(plan.parallelism)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return run.result()


class _Run(Generic[Rows]):
    """State of one execution of one plan."""

    def __init__(self, executor: InProcessExecutor[Rows], plan: EpochPlan) -> None:
        self.executor = executor
        self.plan = plan
        self.barrier = threading.Barrier(plan.parallelism, timeout=GATHER_TIMEOUT_S)
        self.lock = threading.Lock()
        self.votes: dict[int, Vote] = {}
        self.reports: dict[int, PartitionReport] = {}
        self.errors: dict[int, BaseException] = {}
        self.crash: BaseException | None = None
        self.passed: set[int] = set()  # partitions through the barrier (must not break it)

    def task(self, partition: int) -> None:
        aligned = self.plan.mode is CommitMode.ALIGNED
        try:
            report = run_partition(
                self.executor._resource,  # noqa: SLF001 - same module
                self.plan,
                partition,
                self.executor._rows_for(self.plan, partition),  # noqa: SLF001
                gather=self.gather if aligned else None,
                hooks=self.executor._task_hooks,  # noqa: SLF001
            )
        except BaseException as exc:  # noqa: BLE001 - recorded and re-raised by result()
            with self.lock:
                self.errors[partition] = exc
                if not isinstance(exc, Exception) and self.crash is None:
                    self.crash = exc
                release_others = partition not in self.passed
            if release_others:  # breaking a released barrier would fail the others' wait
                self.barrier.abort()
            return
        with self.lock:
            self.reports[partition] = report

    def gather(self, vote: Vote) -> Sequence[Vote]:
        with self.lock:
            self.votes[vote.partition] = vote
            count = len(self.votes)
        hook = self.executor._vote_hook  # noqa: SLF001
        if hook is not None:
            try:
                hook(vote, count)
            except BaseException as exc:
                if not isinstance(exc, Exception):
                    with self.lock:
                        self.crash = self.crash or exc
                self.barrier.abort()
                raise
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            crash = self.crash
            if crash is not None:  # the "driver" died: the task dies too, without cleanup
                raise type(crash)(*crash.args) from None
            msg = f"epoch {self.plan.epoch}: another partition failed before voting"
            raise TxnError(msg, code=TxnCode.PARTICIPANT) from None
        with self.lock:
            self.passed.add(vote.partition)
            return [self.votes[p] for p in sorted(self.votes)]

    def result(self) -> Sequence[PartitionReport]:
        if self.crash is not None:
            raise self.crash
        if self.errors:
            first = min(self.errors)
            raise self.errors[first]
        return [self.reports[p] for p in sorted(self.reports)]
