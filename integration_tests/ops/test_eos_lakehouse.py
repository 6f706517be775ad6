"""``eos`` on the table sinks (Delta Lake, Iceberg): status, offsets, abort-lingering, verify.

No Spark: each test drives the sink's resource with the txn coordinator in this process (as
the crash matrix does), on a real table, and crashes the driver at a protocol step where it
needs an epoch in doubt; then runs ``eos`` as an operator would and checks what it shows and
does against the table.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from connectors.lakehouse import delta_table, iceberg_table
from connectors.lakehouse._table import TableFormat, TableResource
from connectors.ops import main
from connectors.stage import ArrowPartition
from connectors.stage._rows import HASH_COLUMN
from connectors.verify import produce_input, read_committed_topic
from txn import CommitMode, Coordinator, CoordinatorStep, EpochPlan, FileEpochLog, InputOffsets
from txn._executor import InProcessExecutor

pytest.importorskip("deltalake", reason="needs the [delta] extra")
pytest.importorskip("pyiceberg", reason="needs the [iceberg] extra")

SCHEMA = pa.schema([("id", pa.int64()), ("key", pa.string())])
PARALLELISM = 2


class Crash(Exception):
    """The driver dies at a step (raised by the coordinator's hook)."""


class Lake:
    """One table sink's table, its epoch log file, and a driver writing epochs of rows."""

    def __init__(self, kind: str, tmp: Path, sink_id: str = "orders") -> None:
        self.kind, self.tmp, self.sink_id = kind, tmp, sink_id
        self.catalog = {
            "type": "sql",
            "uri": f"sqlite:///{tmp}/catalog.db",
            "warehouse": f"file://{tmp}/warehouse",
        }
        if kind == "delta":
            from deltalake import DeltaTable

            DeltaTable.create(str(tmp / "delta"), schema=SCHEMA)
            self.log_path = str(tmp / "delta" / "_eos" / f"{sink_id}.epochlog")
        else:
            from pyiceberg.catalog import load_catalog

            catalog = load_catalog("lake", **self.catalog)
            catalog.create_namespace("db")
            catalog.create_table("db.t", schema=SCHEMA)
            self.log_path = str(tmp / f"{sink_id}.epochlog")
        Path(self.log_path).parent.mkdir(parents=True, exist_ok=True)

    def table(self) -> TableFormat:
        if self.kind == "delta":
            return delta_table(str(self.tmp / "delta"))
        return iceberg_table("db.t", "lake", self.catalog)

    def write(
        self, epoch: int, rows: list[dict[str, Any]], crash_at: CoordinatorStep | None = None
    ) -> None:
        """Run ``epoch`` through a new driver (recover first); ``crash_at``: die there."""

        def hook(step: CoordinatorStep, at: int) -> None:
            if step is crash_at and at == epoch:
                raise Crash(step.value)

        def rows_for(plan: EpochPlan, partition: int) -> ArrowPartition:
            mine = [r for r in rows if zlib.crc32(b"%d" % r["id"]) % plan.parallelism == partition]
            batch = pa.RecordBatch.from_pylist(mine, schema=SCHEMA)
            hashes = pa.array([zlib.crc32(b"%d" % r["id"]) for r in mine], pa.int64())
            return ArrowPartition([batch.append_column(HASH_COLUMN, hashes)])

        resource = TableResource(fmt=self.table(), app=self.sink_id, digest="fp")
        with FileEpochLog(self.log_path, sink_id=self.sink_id) as log:
            coordinator = Coordinator(
                log, resource, sink_id=self.sink_id, mode=CommitMode.UNALIGNED, hooks=hook
            )
            coordinator.recover()
            offsets = InputOffsets.of({("in", 0): 10 * epoch}, {("in", 0): 10 * epoch + 10})
            try:
                coordinator.run_epoch(
                    epoch, PARALLELISM, InProcessExecutor(resource, rows_for), input_offsets=offsets
                )
            except Crash:
                return

    def cli(self, *extra: str, sink_id: str | None = None) -> tuple[str, ...]:
        """``SINK_ID`` and the options that point ``eos`` at the table and the log."""
        sink = sink_id or self.sink_id
        if self.kind == "delta":
            return (sink, "--delta", str(self.tmp / "delta"), *extra)
        log = str(self.tmp / f"{sink}.epochlog")
        props = [f"--catalog-property={k}={v}" for k, v in self.catalog.items()]
        return (sink, "--iceberg", "db.t", "--catalog", "lake", *props, "--epoch-log", log, *extra)


def rows_of(first: int, count: int) -> list[dict[str, Any]]:
    return [{"id": i, "key": f"k{i % 3}"} for i in range(first, first + count)]


def eos(*args: str, capsys: Any, bootstrap: str | None = None) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main([*(["--bootstrap-servers", bootstrap] if bootstrap else []), "--json", *args])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(params=["delta", "iceberg"])
def lake(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Lake:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("POSTGRES_DSN", raising=False)
    return Lake(request.param, tmp_path)


def test_status_and_offsets_show_the_log_and_the_table(lake: Lake, capsys: Any) -> None:
    lake.write(0, rows_of(0, 10))
    lake.write(1, rows_of(10, 10))
    code, status = eos("status", *lake.cli(), capsys=capsys)
    assert code == 0, status
    assert status["last_committed_epoch"] == 1 and status["table_epoch"] == 1
    assert sum(m["rows"] for m in status["markers"].values()) == 10
    assert status["prepared"] == []
    code, offsets = eos("offsets", *lake.cli(), capsys=capsys)
    assert code == 0, offsets
    assert offsets["starting_offsets"] == {"in": {"0": 20}}
    assert offsets["in_output"]["epoch"] == 1  # the table's commit recorded the same input
    code, unknown = eos("status", *lake.cli(sink_id="nope"), capsys=capsys)
    assert code == 3, unknown


@pytest.mark.parametrize(
    ("step", "action"),
    [(CoordinatorStep.REPORTS_RECEIVED, "delete"), (CoordinatorStep.DECISION_LOGGED, "commit")],
)
def test_abort_lingering_finishes_vote_records_as_the_log_decided(
    lake: Lake, capsys: Any, step: CoordinatorStep, action: str
) -> None:
    lake.write(0, rows_of(0, 10))
    lake.write(1, rows_of(10, 10), crash_at=step)
    code, status = eos("status", *lake.cli(), capsys=capsys)
    assert code == 1, status  # an epoch in doubt, vote records left
    assert {(p["epoch"], p["action"]) for p in status["prepared"]} == {(1, action)}
    assert status["table_epoch"] == 0
    code, dry = eos("abort-lingering", *lake.cli("--dry-run"), capsys=capsys)
    assert code == 0 and dry["committed_epochs"] == [] and len(dry["prepared"]) == PARALLELISM
    code, done = eos("abort-lingering", *lake.cli(), capsys=capsys)
    assert code == 0, done
    assert done["committed_epochs"] == ([1] if action == "commit" else [])
    code, after = eos("status", *lake.cli(), capsys=capsys)
    assert after["prepared"] == []
    assert after["table_epoch"] == (1 if action == "commit" else 0)
    ids = sorted(lake.table().read(["id"])["id"].to_pylist())
    assert ids == list(range(20 if action == "commit" else 10))
    lake.write(1, rows_of(10, 10))  # the replay: recovery completes or redoes epoch 1
    assert sorted(lake.table().read(["id"])["id"].to_pylist()) == list(range(20))


def test_verify_a_lake_table_passes_and_a_tampered_one_fails(
    lake: Lake, kafka_bootstrap: str, new_topic: Any, capsys: Any
) -> None:
    topic = new_topic("eos-lake-in", 2)
    produce_input(kafka_bootstrap, topic, 30, keys=3)
    values = [json.loads(r.value or b"{}") for r in read_committed_topic(kafka_bootstrap, topic)]
    rows = [{"id": v["id"], "key": v["key"]} for v in values]
    lake.write(0, [r for r in rows if r["id"] < 15])
    lake.write(1, [r for r in rows if r["id"] >= 15])
    check = ("verify", "--input-topic", topic, "--sink-id", *lake.cli())
    code, ok = eos(*check, capsys=capsys, bootstrap=kafka_bootstrap)
    assert code == 0, ok
    assert ok["ok"] and ok["input_records"] == 30 and ok["table_rows"] == 30
    extra = pa.Table.from_pylist([rows[3]], schema=SCHEMA)  # another writer duplicates a row
    if lake.kind == "delta":
        from deltalake import write_deltalake

        write_deltalake(str(lake.tmp / "delta"), extra, mode="append")
    else:
        lake.table().table().append(extra)  # type: ignore[attr-defined]
    code, bad = eos(*check, capsys=capsys, bootstrap=kafka_bootstrap)
    assert code == 1 and bad["anomalies"]["duplicate"] == 1, bad
