"""The txn core's crash matrix on the Delta resource: a real Delta table, no Spark.

Every case of ``txn.testing.crash_params`` for a coordinator-completable participant, both
commit modes, with full epochs, every other epoch empty, and one row per epoch; and the
same cases for upserts (one merge per epoch). Each case
crashes during epoch 1 of 3, restarts the driver and replays; then every row is in the table
once, every data file on storage is named by the table's log (nothing of an aborted or
superseded attempt is left), no vote record is left, the table's app transaction says the
last epoch, and no recovery ever left an epoch partly visible.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

from connectors.lakehouse._delta import DeltaFormat
from connectors.lakehouse._table import EpochCommit
from tests.lakehouse._world import SCHEMA, TableWorld, relative_files
from txn import CommitMode
from txn.testing import PG_LIKE, Crash, crash_params, run_crash_case
from txn.testing._crash import EMPTY, FULL, ONE_ROW

deltalake = pytest.importorskip("deltalake", reason="DeltaSink needs the [delta] extra")


@dataclass
class DeltaWorld(TableWorld):
    def create_table(self) -> None:
        deltalake.DeltaTable.create(str(self.table_dir), schema=SCHEMA)

    @property
    def table_dir(self) -> Path:
        return self.tmp_path / "table"

    def staging_root(self) -> Path:
        return self.table_dir

    def table_format(self) -> DeltaFormat:
        keys = ("id",) if self.keyed else ()
        return DeltaFormat(uri=str(self.table_dir), schema=SCHEMA, keys=keys)

    def commits_of_sink(self) -> list[int]:
        history = deltalake.DeltaTable(str(self.table_dir)).history()
        found = [EpochCommit.parse(c) for c in reversed(history)]
        return [c.epoch for c in found if c is not None and c.app == self.sink_id]

    def table_ids(self) -> list[tuple[int, int]]:
        table = deltalake.DeltaTable(str(self.table_dir))
        rows = (
            table.to_pyarrow_table(columns=["id", "epoch"])
            if hasattr(table, "to_pyarrow_table")
            else None
        )
        if rows is None:  # pragma: no cover - deltalake < 1.0
            raise AssertionError("deltalake without to_pyarrow_table")
        return list(zip(rows["id"].to_pylist(), rows["epoch"].to_pylist(), strict=True))

    def data_files(self) -> tuple[set[str], set[str]]:
        return relative_files(self.table_dir, skip=("_delta_log", "_eos")), delta_named(
            self.table_dir
        )


def delta_named(table_dir: Path) -> set[str]:
    """Every data file a commit of the table ever added (a merge's rewrites remove files from
    the current version; they stay on storage until a VACUUM)."""
    named = set()
    for commit in sorted((table_dir / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                named.add(unquote(action["add"]["path"]))
    return named


@pytest.mark.parametrize("shape", [FULL, EMPTY, ONE_ROW])
@pytest.mark.parametrize(("kind", "mode", "crash"), crash_params((PG_LIKE,)))
def test_crash_recover_replay_is_exactly_once(
    tmp_path: Path, kind: str, mode: CommitMode, crash: Crash, shape: str
) -> None:
    world = DeltaWorld(mode=mode, tmp_path=tmp_path, shape=shape)
    world.create_table()
    run_crash_case(world, crash)


@pytest.mark.parametrize(("kind", "mode", "crash"), crash_params((PG_LIKE,)))
def test_upserts_crash_recover_replay_is_exactly_once(
    tmp_path: Path, kind: str, mode: CommitMode, crash: Crash
) -> None:
    """Upserts: each epoch rewrites the same keys in one merge; every key holds the last epoch
    (never a mix after a recovery) and the table's log has one merge commit per epoch."""
    world = DeltaWorld(mode=mode, tmp_path=tmp_path, keyed=True)
    world.create_table()
    run_crash_case(world, crash)
