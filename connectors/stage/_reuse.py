"""Client reuse across epochs: the one owner of the rules.

Why reuse: a write task's clients (a transactional producer and its marker consumer, a
database connection) are expensive to create and to fence; Spark reuses Python workers,
so the worker that wrote partition ``p`` of epoch ``N`` can keep them for ``N + 1``.
Why it needs rules: a kept client is only safe while nobody else used its identity in
between (a newer instance fences it; committing through a fenced producer fails, and an
open transaction of a dead attempt must be aborted by a fresh ``init``).

The rules:

1. only the first attempt of a task, in the first run of the write stage, of the first
   plan attempt of an epoch may reuse (any retry, stage re-run or in-doubt redo creates
   fresh clients, whose initialization fences and aborts what a dead attempt left);
2. the driver's *client generation* must be the one the client was pooled under; the
   driver starts a new generation whenever clients of the sink may have been fenced by
   an instance the pooled ones do not know of: recovery, a failed epoch, a stage re-run,
   a Spark task retry, a change of parallelism;
3. the marker read now must equal the marker the pooled client committed (or read right
   after its own initialization): then no other instance committed in between.

:class:`ReusePolicy` (driver) owns the generation and the events that renew it; the
:class:`ReuseTicket` it issues for one stage run travels to the tasks and answers the
task-side questions. Connectors ask the ticket; none of them re-implements a rule.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from txn import EpochPlan, Marker

log = logging.getLogger("connectors.stage.reuse")


def _new_generation() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class ReuseDecision:
    """Answer of :meth:`ReuseTicket.decide`: reuse or not, why, and the marker read."""

    reuse: bool
    reason: str
    marker: Marker | None = None
    marker_read: bool = False


@dataclass(frozen=True)
class ReuseTicket:
    """What a write task needs to decide on reuse (picklable; in the task spec)."""

    generation: str
    plan_attempt: int = 0
    stage_run: int = 0

    def may_reuse(self, task_attempt: int) -> bool:
        """Rule 1: True only for the first attempt of everything."""
        return task_attempt == 0 and self.stage_run == 0 and self.plan_attempt == 0

    def decide(
        self,
        task_attempt: int,
        pooled_generation: str | None,
        pooled_marker: Marker | None,
        read_marker: Callable[[], Marker | None],
    ) -> ReuseDecision:
        """Apply rules 1-3 to a pooled client; ``read_marker`` is called only if needed.

        ``pooled_generation`` None: nothing is pooled.
        """
        if not self.may_reuse(task_attempt):
            return ReuseDecision(False, "a retry or redo: fresh clients fence the dead attempt")
        if pooled_generation is None:
            return ReuseDecision(False, "no pooled client")
        if pooled_generation != self.generation:
            return ReuseDecision(False, "pooled under an older client generation")
        marker = read_marker()
        if marker != pooled_marker:
            return ReuseDecision(
                False, f"marker {marker} is not the pooled client's {pooled_marker}", marker, True
            )
        return ReuseDecision(True, "pooled client still owns its identity", marker, True)


class ReusePolicy:
    """Driver side: the client generation and the events that renew it (rule 2)."""

    def __init__(self) -> None:
        self._generation = _new_generation()
        self._parallelism: int | None = None

    @property
    def generation(self) -> str:
        """The current client generation."""
        return self._generation

    def renew(self, why: str) -> None:
        """Start a new generation: clients pooled before now are not reused."""
        self._generation = _new_generation()
        log.debug("new client generation (%s)", why)

    def ticket(self, plan: EpochPlan, stage_run: int) -> ReuseTicket:
        """Return the ticket of one run of ``plan``'s write stage.

        A change of parallelism renews the generation first: the shrink's lingering-abort
        fenced the ids beyond the new parallelism.
        """
        if plan.parallelism != self._parallelism:
            if self._parallelism is not None:
                self.renew(f"parallelism {self._parallelism} -> {plan.parallelism}")
            self._parallelism = plan.parallelism
        return ReuseTicket(self._generation, plan.attempt, stage_run)
