"""Unit test of the soak run's fault drawing (no Kafka, no Spark)."""

from __future__ import annotations

import random

from connectors.stage._hooks import TASK_STEPS
from integration_tests.support.soak import SOAK_DRIVER_STEPS, TASK_ACTIONS, draw_faults


def test_soak_draws_every_fault_type() -> None:
    faults, app_kills = draw_faults(random.Random(5), 400, 10)
    steps = {f["step"] for f in faults}
    assert steps == set(TASK_STEPS) | set(SOAK_DRIVER_STEPS)
    # The Kafka sink has no coordinator-completed participant: that step never fires.
    assert "driver_after_decision" not in steps
    assert {f["action"] for f in faults if f["step"] in TASK_STEPS} == set(TASK_ACTIONS)
    assert "kill_app" in TASK_ACTIONS
    assert app_kills > 0
    assert all(0 <= f["epoch"] < 10 for f in faults)
