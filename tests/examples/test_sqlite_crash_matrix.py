"""The txn core's crash matrix on the SQLite example's resource, over a real database file.

Every case of ``txn.testing.crash_params`` that applies to a commit-in-task resource in
unaligned mode (coordinator and task crashes at every protocol step): crash during epoch 1
of 3, restart the driver (new epoch log handle, new resource, recovery), replay; then
every row is in the table once, no transaction is left open, each partition's marker and
the log say every epoch committed. This file is the pattern docs/writing-a-db-connector.md
tells a connector author to copy.
"""

from __future__ import annotations

# --8<-- [start:world]
import sqlite3
import zlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from connectors.examples.sqlite import (
    SqliteResource,
    SqliteSinkConfig,
    prepare_database,
    read_markers,
)
from connectors.stage import HASH_COLUMN, ArrowPartition
from txn import CommitMode, EpochLog, EpochPlan, FileEpochLog
from txn.testing import KAFKA_LIKE, Crash, CrashWorld, crash_params, run_crash_case

ROWS_PER_EPOCH = 12


def epoch_ids(epoch: int) -> list[int]:
    return [epoch * 1000 + i for i in range(ROWS_PER_EPOCH)]


@dataclass
class SqliteWorld(CrashWorld[ArrowPartition]):
    """The durable state: the database file and the epoch log file under ``tmp_path``."""

    tmp_path: Path

    def cfg(self) -> SqliteSinkConfig:
        return SqliteSinkConfig(
            path=str(self.tmp_path / "db.sqlite"),
            table="t",
            sink_id=self.sink_id,
            busy_timeout_s=5.0,
        )

    def create_table(self) -> None:
        with sqlite3.connect(self.cfg().path) as db:
            db.execute("CREATE TABLE t (id INTEGER, epoch INTEGER, payload TEXT)")

    def open_log(self) -> EpochLog:
        return FileEpochLog(self.cfg().epoch_log_path, sink_id=self.sink_id)

    def new_resource(self) -> SqliteResource:
        prepare_database(self.cfg())  # what the connector's preflight does
        return SqliteResource(self.cfg(), ("id", "epoch", "payload"))

    def rows_for(self, plan: EpochPlan, partition: int) -> ArrowPartition:
        """Route by content, as the Spark stage does: a replay meets the same partition."""
        ids = [
            i
            for i in epoch_ids(plan.epoch)
            if zlib.crc32(b"%d" % i) % plan.parallelism == partition
        ]
        return ArrowPartition(
            [
                pa.record_batch(
                    {
                        "id": pa.array(ids, pa.int64()),
                        "epoch": pa.array([plan.epoch] * len(ids), pa.int64()),
                        "payload": pa.array([f"row {i}" for i in ids]),
                        HASH_COLUMN: pa.array([zlib.crc32(b"%d" % i) for i in ids], pa.int64()),
                    }
                )
            ]
        )

    def check_exactly_once(self, epochs: int) -> None:
        with sqlite3.connect(self.cfg().path, timeout=0) as db:
            ids = sorted(i for (i,) in db.execute("SELECT id FROM t"))
            db.execute("BEGIN IMMEDIATE")  # fails if a transaction was left open
            db.rollback()
        assert ids == [i for e in range(epochs) for i in epoch_ids(e)]
        markers = read_markers(self.cfg(), self.parallelism)
        assert {p: m.epoch for p, m in markers.items()} == dict.fromkeys(
            range(self.parallelism), epochs - 1
        )
        self.check_log(epochs)


@pytest.mark.parametrize(
    ("kind", "mode", "crash"), crash_params((KAFKA_LIKE,), modes=(CommitMode.UNALIGNED,))
)
def test_crash_recover_replay_is_exactly_once(
    tmp_path: Path, kind: str, mode: CommitMode, crash: Crash
) -> None:
    world = SqliteWorld(tmp_path, mode=mode)
    world.create_table()
    run_crash_case(world, crash)


# --8<-- [end:world]


def test_the_matrix_covers_every_task_step_that_applies() -> None:
    from txn import TaskStep

    steps = {c.values[2].step for c in crash_params((KAFKA_LIKE,), modes=(CommitMode.UNALIGNED,))}
    assert {
        TaskStep.OPENED,
        TaskStep.WRITTEN,
        TaskStep.PRE_COMMITTED,
        TaskStep.DECIDED,
        TaskStep.COMMITTED,
    } <= steps


def test_a_broken_recovery_is_caught(tmp_path: Path) -> None:
    """The matrix can fail: a resource that forgets its marker duplicates the replayed rows."""
    from txn import TaskStep

    @dataclass
    class Forgetful(SqliteWorld):
        def new_resource(self) -> SqliteResource:
            resource = super().new_resource()
            with sqlite3.connect(self.cfg().path) as db:
                db.execute("DELETE FROM eos_markers")  # the "bug": markers are lost
            return resource

    world = Forgetful(tmp_path, mode=CommitMode.UNALIGNED)
    world.create_table()
    with pytest.raises(AssertionError):
        run_crash_case(world, Crash(where="task", step=TaskStep.COMMITTED, partition=1))
    with sqlite3.connect(world.cfg().path) as db:
        twice = db.execute("SELECT id FROM t GROUP BY id HAVING count(*) > 1").fetchall()
    assert twice, "the forgetful resource should have written partition 1 of epoch 1 twice"


def test_aligned_mode_deadlocks_on_the_database_write_lock(tmp_path: Path) -> None:
    """Why the config refuses aligned mode: every partition's transaction waits for the vote
    holding SQLite's only write lock, so the others time out and the epoch can never commit."""
    pass
    from connectors.examples.sqlite import SqliteCode, SqliteSinkError
    from txn import Coordinator
    from txn._executor import InProcessExecutor

    world = SqliteWorld(tmp_path)
    world.create_table()
    cfg = SqliteSinkConfig(
        path=str(tmp_path / "db.sqlite"), table="t", sink_id="s", busy_timeout_s=0.3
    )
    prepare_database(cfg)
    resource = SqliteResource(cfg, ("id", "epoch", "payload"))
    with FileEpochLog(tmp_path / "aligned.log", sink_id="s") as log:
        coordinator = Coordinator(log, resource, sink_id="s", mode=CommitMode.ALIGNED)
        with pytest.raises(SqliteSinkError, check=lambda e: e.code is SqliteCode.WRITE) as info:
            coordinator.run_epoch(0, 3, InProcessExecutor(resource, world.rows_for))
    assert (
        info.value.sqlite_code is not None and info.value.sqlite_code & 0xFF == sqlite3.SQLITE_BUSY
    )
    with sqlite3.connect(cfg.path) as db:
        assert db.execute("SELECT count(*) FROM t").fetchone() == (0,)
