"""The protocol's named steps: where hooks are called (crash and fault injection).

One set of names for every hook: the crash matrices of :mod:`txn.testing` and the
Spark stage's fault plans (``connectors.testing.FaultPlan``) both use these enums, and a
fault plan file names a step by its value (``"after_open"``, ``"driver_after_plan"``...).
The steps follow docs/architecture.md, section 2.
"""

from __future__ import annotations

import enum


class TaskStep(str, enum.Enum):
    """Steps of the task side (:func:`txn._task.run_partition`), in protocol order."""

    OPENED = "after_open"  # participant created (older instances fenced), marker not read
    # Inside ``write``, once the fault's ``after_rows`` rows were read: fired by the engine's
    # row iterator (the Spark stage), never by run_partition, which cannot count rows.
    MID_WRITE = "mid_write"
    WRITTEN = "after_write"  # write returned inside the open transaction, not pre-committed
    PRE_COMMITTED = "after_pre_commit"  # pre_commit returned, the yes vote not sent
    DECIDED = "before_commit"  # votes gathered, decision known, nothing committed or aborted
    COMMITTED = "after_commit"  # commit returned, report not yet returned (before the ack)
    ABORTED = "after_abort"  # abort after a no decision returned


class CoordinatorStep(str, enum.Enum):
    """Steps of the driver side (:meth:`txn.Coordinator.run_epoch`), in protocol order."""

    # Plan about to be logged (with the epoch before's deferred completion), nothing durable.
    BEFORE_PLAN = "driver_before_plan"
    PLAN_LOGGED = "driver_after_plan"  # plan durable, write stage not started
    STAGE_RETURNED = "driver_after_stage"  # write stage returned, reports not checked
    REPORTS_RECEIVED = "driver_before_complete"  # reports checked, outcome not logged
    DECISION_LOGGED = "driver_after_decision"  # decision durable, not delivered (2PC only)
    PARTITION_DELIVERED = "driver_after_partition_delivered"  # one more partition got it
    DELIVERED = "driver_after_delivered"  # every partition got the decision, not completed
    COMPLETED = "driver_after_complete"  # completion durable, result not returned
