"""Named points of the write stage where a test can inject a fault.

The stage calls a :class:`StepHooks` object (``connectors.testing.FaultPlan`` in tests;
None in production) at the steps below. The object travels to the write tasks with the
stage's options, so it must be picklable and cheap to call when nothing is planned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

# Steps in a write task, in protocol order.
AFTER_OPEN = "after_open"  # participant opened (older instances fenced), nothing written
MID_WRITE = "mid_write"  # some rows produced inside the open transaction
AFTER_PRE_COMMIT = "after_pre_commit"  # pre-committed, the vote not sent
BEFORE_COMMIT = "before_commit"  # votes gathered, decision known, not committed
AFTER_COMMIT = "after_commit"  # committed, the report not returned
TASK_STEPS = (AFTER_OPEN, MID_WRITE, AFTER_PRE_COMMIT, BEFORE_COMMIT, AFTER_COMMIT)

# Steps on the driver.
DRIVER_AFTER_PLAN = "driver_after_plan"  # plan logged, write stage not started
DRIVER_AFTER_STAGE = "driver_after_stage"  # write stage returned, reports not handed over
DRIVER_BEFORE_COMPLETE = "driver_before_complete"  # reports handed over, completion not logged
DRIVER_AFTER_DECISION = "driver_after_decision"  # decision logged, not delivered (2PC only)
DRIVER_STEPS = (DRIVER_AFTER_PLAN, DRIVER_AFTER_STAGE, DRIVER_BEFORE_COMPLETE,
                DRIVER_AFTER_DECISION)


@runtime_checkable
class StepHooks(Protocol):
    """Fault injection at named steps (testing only)."""

    def fire(self, step: str, epoch: int, partition: int | None = None) -> None:
        """Act at ``step`` of ``epoch`` (``partition`` None on the driver)."""

    def interrupt_write(self, epoch: int, partition: int) -> tuple[int, Callable[[], None]] | None:
        """Return ``(rows, callback)`` to call ``callback`` once ``rows`` rows were written."""
