"""Unit test of the soak run's fault drawing (no Kafka, no Spark).

It stays next to ``soak.py``: the soak is a test tool of ``integration_tests``, not part of
the ``connectors`` package, so ``tests/`` has no business importing it.
"""

from __future__ import annotations

import random

from integration_tests.e2e.soak import DRIVER_STEPS, TASK_ACTIONS, TASK_STEPS, draw_faults


def test_soak_draws_every_fault_type() -> None:
    faults, app_kills = draw_faults(random.Random(5), 400, 10)
    steps = {f["step"] for f in faults}
    assert steps == set(TASK_STEPS) | set(DRIVER_STEPS)
    assert {f["action"] for f in faults if f["step"] in TASK_STEPS} == set(TASK_ACTIONS)
    assert "kill_app" in TASK_ACTIONS
    assert app_kills > 0
    assert all(0 <= f["epoch"] < 10 for f in faults)
