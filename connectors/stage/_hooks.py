"""Named points of the write stage where a test can inject a fault.

The stage calls a :class:`StepHooks` object (``connectors.testing.FaultPlan`` in tests;
None in production) at every step of the protocol, named by ``txn.TaskStep`` (in the
write tasks) and ``txn.CoordinatorStep`` (on the driver): one set of names, whose values
(``"after_open"``, ``"mid_write"``, ``"driver_after_plan"``...) a fault plan file uses.
The object travels to the write tasks with the stage's options, so it must be picklable
and cheap to call when nothing is planned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from txn import CoordinatorStep, TaskStep

# The step names a fault plan may use, in protocol order: every step of either side.
TASK_STEPS = tuple(step.value for step in TaskStep)
DRIVER_STEPS = tuple(step.value for step in CoordinatorStep)


@runtime_checkable
class StepHooks(Protocol):
    """Fault injection at named steps (testing only)."""

    def fire(
        self, step: TaskStep | CoordinatorStep, epoch: int, partition: int | None = None
    ) -> None:
        """Act at ``step`` of ``epoch`` (``partition`` None on the driver)."""

    def interrupt_write(self, epoch: int, partition: int) -> tuple[int, Callable[[], None]] | None:
        """Return ``(rows, callback)`` to call ``callback`` once ``rows`` rows were written."""
