"""``task_slots`` on the session's local Spark (``local[2]``): the scheduler's own count."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.stage import InsufficientSlotsError
from connectors.stage import _slots as slots_module
from connectors.stage._slots import SOURCE_SCHEDULER, task_slots, wait_for_task_slots

pytestmark = [pytest.mark.spark]


def test_local_session_has_its_thread_count_as_slots(spark: Any) -> None:
    slots = task_slots(spark)
    assert (slots.total, slots.executors, slots.source) == (2, 0, SOURCE_SCHEDULER)
    assert slots.running == 0 and slots.free == 2
    assert task_slots(spark.sparkContext) == slots
    assert wait_for_task_slots(spark, 5, timeout_s=0.2).total == 2  # returns the last count


def test_local_mode_refuses_at_once_without_waiting_for_executors(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Local mode has no executors (0 registered) and never gains slots: waiting for the
    # first executors (as on a starting cluster) would only delay the error.
    def no_wait(*_: Any, **__: Any) -> None:
        raise AssertionError("check_slots waited for executors in local mode")

    monkeypatch.setattr(slots_module, "wait_for_task_slots", no_wait)
    with pytest.raises(InsufficientSlotsError, match="only 2 task slot"):
        slots_module.check_slots(spark, 3)
    slots_module.check_slots(spark, 2)
