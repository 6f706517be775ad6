"""The protocol's step names: one pair of enums, fired in the order they are declared."""

from __future__ import annotations

from pathlib import Path

from txn import CommitMode, CoordinatorStep, EpochPlan, TaskStep
from txn.testing import KAFKA_LIKE, PG_LIKE, MemoryWorld


def _record(world: MemoryWorld) -> tuple[list[CoordinatorStep], list[TaskStep]]:
    driver: list[CoordinatorStep] = []
    task: list[TaskStep] = []

    def on_driver(step: CoordinatorStep, epoch: int) -> None:
        driver.append(step)

    def on_task(step: TaskStep, plan: EpochPlan, partition: int) -> None:
        if partition == 0:
            task.append(step)

    world.on_coordinator_step = on_driver  # type: ignore[method-assign]
    world.on_task_step = on_task  # type: ignore[method-assign]
    return driver, task


def test_a_two_phase_epoch_fires_every_driver_step_in_declared_order(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=PG_LIKE, mode=CommitMode.ALIGNED)
    driver, task = _record(world)
    world.run_epoch(0)
    world.close()
    p = CoordinatorStep.PARTITION_DELIVERED
    assert driver == [
        CoordinatorStep.BEFORE_PLAN,
        CoordinatorStep.PLAN_LOGGED,
        CoordinatorStep.STAGE_RETURNED,
        CoordinatorStep.REPORTS_RECEIVED,
        CoordinatorStep.DECISION_LOGGED,
        p,
        p,
        p,
        CoordinatorStep.DELIVERED,
        CoordinatorStep.COMPLETED,
    ]
    assert list(dict.fromkeys(driver)) == list(CoordinatorStep)
    assert task == [TaskStep.OPENED, TaskStep.WRITTEN, TaskStep.PRE_COMMITTED, TaskStep.DECIDED]


def test_a_commit_in_task_epoch_fires_the_task_steps_in_declared_order(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=KAFKA_LIKE, mode=CommitMode.ALIGNED)
    driver, task = _record(world)
    world.run_epoch(0)
    world.close()
    assert driver == [
        CoordinatorStep.BEFORE_PLAN,
        CoordinatorStep.PLAN_LOGGED,
        CoordinatorStep.STAGE_RETURNED,
        CoordinatorStep.REPORTS_RECEIVED,
        CoordinatorStep.COMPLETED,
    ]
    # MID_WRITE is fired by the engine's row iterator, ABORTED only after a no decision.
    assert task == [s for s in TaskStep if s not in (TaskStep.MID_WRITE, TaskStep.ABORTED)]
