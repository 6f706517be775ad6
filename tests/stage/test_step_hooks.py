"""The stage's fault hooks: the protocol's step enums, named by value in a fault plan, and
the process-wide seam (``connectors.stage._hooks``) that ``inject_faults`` installs them in.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from connectors.stage import StageOptions, _hooks
from connectors.stage._hooks import DRIVER_STEPS, TASK_STEPS
from connectors.testing import FaultPlan, InjectedFault, inject_faults
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


def _raising_plan(tmp_path: Path, step: str) -> FaultPlan:
    path = tmp_path / "plan.json"
    path.write_text(f'[{{"id": "f", "step": "{step}", "action": "raise", "times": 9}}]')
    return FaultPlan(str(path))


def test_no_stage_option_carries_hooks() -> None:
    """Production options have no fault plan: tests install one (inject_faults)."""
    assert not any("fault" in f.name for f in dataclasses.fields(StageOptions))


def test_inject_faults_installs_the_plan_for_the_block_only(tmp_path: Path) -> None:
    plan = _raising_plan(tmp_path, "driver_after_plan")
    assert _hooks.installed("any") is None
    with inject_faults(plan) as injected:
        assert injected is plan and _hooks.installed("any") is plan
        (tmp_path / "inner").mkdir()
        inner = _raising_plan(tmp_path / "inner", "after_open")
        with inject_faults(inner):
            assert _hooks.installed("any") is inner
        assert _hooks.installed("any") is plan  # the outer plan is back
    assert _hooks.installed("any") is None


def test_inject_faults_restores_the_hooks_when_the_block_raises(tmp_path: Path) -> None:
    plan = _raising_plan(tmp_path, "driver_after_plan")
    with pytest.raises(InjectedFault), inject_faults(plan):
        plan.fire(CoordinatorStep.PLAN_LOGGED, 1)
    assert _hooks.installed("any") is None


def test_only_step_hooks_can_be_installed() -> None:
    with pytest.raises(TypeError, match="StepHooks"):
        _hooks.install("faults.json")  # type: ignore[arg-type]
    assert _hooks.installed("any") is None


def test_a_plan_scoped_to_a_sink_id_fires_only_in_that_sink(tmp_path: Path) -> None:
    """Several queries of one application each run into their own plan, none into another's."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mine, theirs = (
        _raising_plan(tmp_path / "a", "after_open"),
        _raising_plan(tmp_path / "b", "after_open"),
    )
    with inject_faults(mine, sink_id="q1"), inject_faults(theirs, sink_id="q2"):
        assert _hooks.installed("q1") is mine
        assert _hooks.installed("q2") is theirs
        assert _hooks.installed("q3") is None  # no plan for every sink
        everyone = _raising_plan(tmp_path, "after_open")
        with inject_faults(everyone):
            assert _hooks.installed("q3") is everyone
            assert _hooks.installed("q1") is mine  # a sink's own plan comes first
        assert _hooks.installed("q3") is None
    assert _hooks.installed("q1") is None and _hooks.installed("q2") is None
