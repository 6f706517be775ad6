"""Crash injection at every protocol step, for both participant kinds and both commit modes.

Each case crashes once (or as stated) during epoch 1 of 3, restarts the driver (new
FileEpochLog over the same file, new coordinator, recover()) and replays the epoch as Spark
would. Then: every epoch applied exactly once, no partition committed twice, no open or
prepared transaction left, the log says every epoch committed, and (2PC) no epoch was ever
partly committed after a recovery. Every case runs with full epochs, with every other
epoch empty (every write partition empty) and with one row per epoch (the other partitions
empty). The matrix and the driver are ``txn.testing``'s, the ones a connector runs against
its own resource.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from txn import CommitMode
from txn.testing import KINDS, SHAPES, Crash, MemoryWorld, crash_params, run_crash_case


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("kind", "mode", "crash"), crash_params(KINDS))
def test_crash_recover_replay_is_exactly_once(
    tmp_path: Path, kind: str, mode: CommitMode, crash: Crash, shape: str
) -> None:
    run_crash_case(MemoryWorld(tmp_path=tmp_path, kind=kind, mode=mode, shape=shape), crash)
