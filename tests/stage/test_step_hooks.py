"""The stage's fault hooks use the protocol's step enums; a fault plan names them by value."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.stage import DRIVER_STEPS, TASK_STEPS
from connectors.testing import FaultPlan, InjectedFault
from txn import CoordinatorStep, TaskStep


def test_the_fault_plan_step_names_are_the_enum_values() -> None:
    assert TASK_STEPS == tuple(s.value for s in TaskStep)
    assert DRIVER_STEPS == tuple(s.value for s in CoordinatorStep)
    assert (TaskStep.OPENED, TaskStep.DECIDED) == ("after_open", "before_commit")
    assert (CoordinatorStep.PLAN_LOGGED, CoordinatorStep.REPORTS_RECEIVED) == (
        "driver_after_plan",
        "driver_before_complete",
    )


@pytest.mark.parametrize("step", [*TaskStep, *CoordinatorStep], ids=lambda s: s.value)
def test_a_fault_plan_fires_at_the_enum_a_hook_passes(
    tmp_path: Path, step: TaskStep | CoordinatorStep
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(f'[{{"id": "f", "step": "{step.value}", "action": "raise"}}]')
    plan = FaultPlan(str(path))
    other = TaskStep.COMMITTED if step != TaskStep.COMMITTED else TaskStep.OPENED
    plan.fire(other, 1, 0)  # another step: nothing happens
    with pytest.raises(InjectedFault, match="injected fault 'f'"):
        plan.fire(step, 1, 0)
