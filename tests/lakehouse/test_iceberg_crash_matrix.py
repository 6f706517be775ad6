"""The txn core's crash matrix on the Iceberg resource: a real table in a SQLite SQL catalog.

As ``test_delta_crash_matrix.py``: every coordinator-completable case, both modes, full,
empty and one-row epochs; afterwards every row is in the table once, every data file under
the table's data directory is named by a snapshot, no vote record or manifest is left in the
staging area, the newest snapshot of the sink says the last epoch, and no recovery left an
epoch partly visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest

from connectors.lakehouse._iceberg import IcebergFormat
from connectors.lakehouse._table import EpochCommit
from tests.lakehouse._world import SCHEMA, TableWorld, relative_files
from txn import CommitMode
from txn.testing import PG_LIKE, Crash, crash_params, run_crash_case
from txn.testing._crash import EMPTY, FULL, ONE_ROW

pytest.importorskip("pyiceberg", reason="IcebergSink needs the [iceberg] extra")
pytest.importorskip("sqlalchemy", reason="the SQL catalog needs the [iceberg] extra")


def catalog_properties(tmp_path: Path) -> dict[str, str]:
    return {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": f"file://{tmp_path}/warehouse",
    }


@dataclass
class IcebergWorld(TableWorld):
    def create_table(self) -> None:
        catalog = self.table_format().catalog()
        catalog.create_namespace("db")
        catalog.create_table("db.t", schema=SCHEMA)

    @property
    def location(self) -> Path:
        return Path(urlparse(self.table_format().table().location()).path)

    def staging_root(self) -> Path:
        return self.location

    def table_format(self) -> IcebergFormat:
        return IcebergFormat(
            catalog_name="test",
            identifier="db.t",
            catalog_properties=catalog_properties(self.tmp_path),
        )

    def commits_of_sink(self) -> list[int]:
        table = self.table_format().table()
        found = [
            EpochCommit.parse(s.summary.additional_properties)
            for s in table.snapshots()
            if s.summary
        ]
        return [c.epoch for c in found if c is not None and c.app == self.sink_id]

    def table_ids(self) -> list[tuple[int, int]]:
        rows = self.table_format().table().scan(selected_fields=("id", "epoch")).to_arrow()
        return list(zip(rows["id"].to_pylist(), rows["epoch"].to_pylist(), strict=True))

    def data_files(self) -> tuple[set[str], set[str]]:
        table = self.table_format().table()
        named = {
            str(Path(urlparse(task.file.file_path).path).relative_to(self.location))
            for task in table.scan().plan_files()
        }
        return relative_files(self.location, skip=("_eos", "metadata")), named


@pytest.mark.parametrize("shape", [FULL, EMPTY, ONE_ROW])
@pytest.mark.parametrize(("kind", "mode", "crash"), crash_params((PG_LIKE,)))
def test_crash_recover_replay_is_exactly_once(
    tmp_path: Path, kind: str, mode: CommitMode, crash: Crash, shape: str
) -> None:
    world = IcebergWorld(mode=mode, tmp_path=tmp_path, shape=shape)
    world.create_table()
    run_crash_case(world, crash)
