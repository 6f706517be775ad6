"""Crash injection at every protocol step, for both participant kinds and both commit modes.

Each case crashes once (or as stated) during epoch 1 of 3, restarts the driver (new
FileEpochLog over the same file, new coordinator, recover()) and replays the epoch as Spark
would. Then: every epoch applied exactly once, no partition committed twice, no open or
prepared transactions left, the log says every epoch committed, and (2PC) no epoch was ever
partly committed after a recovery. Every case runs with full epochs, with empty odd epochs
(every partition empty) and with one row per epoch (the other partitions empty).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.txn.harness import KINDS, SHAPES, Crash, World, crash_params
from txn import CommitMode


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("kind", "mode", "crash"), crash_params(KINDS))
def test_crash_recover_replay_is_exactly_once(
    tmp_path: Path, kind: str, mode: CommitMode, crash: Crash, shape: str
) -> None:
    crash = Crash(crash.where, crash.step, crash.epoch, crash.partition, crash.after, crash.times)
    world = World(tmp_path, kind, mode, shape=shape)
    world.crashes = [crash]
    results = world.run_epochs(3)
    assert crash.fired == crash.times, "the crash point was never reached: the test proves nothing"
    assert world.restarts >= 1
    world.check_exactly_once(3)
    assert [r.epoch for r in results] == [0, 1, 2]
    assert all(r.committed for r in results)
