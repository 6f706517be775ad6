"""Crash injection at every protocol step, for both participant kinds and both commit modes.

Each case crashes once (or as stated) during epoch 1 of 3, restarts the driver (new
FileEpochLog over the same file, new coordinator, recover()) and replays the epoch as Spark
would. Then: every epoch applied exactly once, no partition committed twice, no open or
prepared transaction left, the log says every epoch committed, and (2PC) no epoch was ever
partly committed after a recovery.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.txn.harness import KAFKA_LIKE, KINDS, PG_LIKE, Crash, World
from txn import CommitMode, CoordinatorStep, TaskStep

C = CoordinatorStep
T = TaskStep

# (id, crash factory, kinds it applies to, aligned-only)
CASES: list[tuple[str, Crash, tuple[str, ...], bool]] = [
    ("coord-after-plan", Crash("coordinator", C.PLAN_LOGGED), KINDS, False),
    ("coord-after-1-vote", Crash("vote", after=1), KINDS, True),
    ("coord-after-2-votes", Crash("vote", after=2), KINDS, True),
    ("coord-after-all-votes", Crash("vote", after=3), KINDS, True),
    ("coord-after-acks-before-outcome", Crash("coordinator", C.REPORTS_RECEIVED), KINDS, False),
    ("coord-after-decision", Crash("coordinator", C.DECISION_LOGGED), (PG_LIKE,), False),
    ("coord-delivered-1-of-3", Crash("coordinator", C.PARTITION_DELIVERED), (PG_LIKE,), False),
    (
        "coord-delivered-2-of-3",
        Crash("coordinator", C.PARTITION_DELIVERED, after=2),
        (PG_LIKE,),
        False,
    ),
    (
        "coord-delivery-then-again-in-recovery",
        Crash("coordinator", C.PARTITION_DELIVERED, after=1, times=2),
        (PG_LIKE,),
        False,
    ),
    ("coord-after-delivery-before-completion", Crash("coordinator", C.DELIVERED), (PG_LIKE,), False),
    ("coord-after-completion", Crash("coordinator", C.COMPLETED), KINDS, False),
    ("task-p1-after-open", Crash("task", T.OPENED, partition=1), KINDS, False),
    ("task-p1-after-pre-commit", Crash("task", T.PRE_COMMITTED, partition=1), KINDS, False),
    ("task-all-after-pre-commit", Crash("task", T.PRE_COMMITTED, after=3), KINDS, False),
    ("task-p1-after-decision", Crash("task", T.DECIDED, partition=1), KINDS, False),
    ("task-p2-after-decision", Crash("task", T.DECIDED, partition=2), KINDS, False),
    ("task-p1-after-commit-before-ack", Crash("task", T.COMMITTED, partition=1), (KAFKA_LIKE,), False),
    (
        "task-p1-after-decision-twice",
        Crash("task", T.DECIDED, partition=1, times=2),
        KINDS,
        False,
    ),
]


def _params() -> list[object]:
    out: list[object] = []
    for case_id, crash, kinds, aligned_only in CASES:
        for kind in kinds:
            for mode in CommitMode:
                if aligned_only and mode is CommitMode.UNALIGNED:
                    continue
                out.append(pytest.param(kind, mode, crash, id=f"{kind}-{mode.value}-{case_id}"))
    return out


@pytest.mark.parametrize(("kind", "mode", "crash"), _params())
def test_crash_recover_replay_is_exactly_once(
    tmp_path: Path, kind: str, mode: CommitMode, crash: Crash
) -> None:
    crash = Crash(crash.where, crash.step, crash.epoch, crash.partition, crash.after, crash.times)
    world = World(tmp_path, kind, mode)
    world.crashes = [crash]
    results = world.run_epochs(3)
    assert crash.fired == crash.times, "the crash point was never reached: the test proves nothing"
    assert world.restarts >= 1
    world.check_exactly_once(3)
    assert [r.epoch for r in results] == [0, 1, 2]
    assert all(r.committed for r in results)
