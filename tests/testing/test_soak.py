"""Unit test of the soak run's fault drawing (no Kafka, no Spark)."""

from __future__ import annotations

import random

from connectors.stage import DRIVER_STEPS, TASK_STEPS
from connectors.testing.soak import TASK_ACTIONS, draw_faults


def test_soak_draws_every_fault_type() -> None:
    faults, app_kills = draw_faults(random.Random(5), 400, 10)
    steps = {f["step"] for f in faults}
    assert steps == set(TASK_STEPS) | set(DRIVER_STEPS)
    assert {f["action"] for f in faults if f["step"] in TASK_STEPS} == set(TASK_ACTIONS)
    assert "kill_app" in TASK_ACTIONS
    assert app_kills > 0
    assert all(0 <= f["epoch"] < 10 for f in faults)
