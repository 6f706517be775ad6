"""Exactly once in full under Spark Connect: aligned mode, the query binding, the defaults.

The streaming query runs on the session's Connect server (``local[2]``); its
``foreachBatch`` function (the sink's coordinator) runs in the Python process the server
starts for it. Every test checks the output with the project's checkers
(``connectors.verify``), not with counts of its own:

* aligned ``KafkaSink`` with the default parallelism: that process is SIGKILLed after an
  epoch's write stage committed and before the epoch was logged complete (the application's
  coordinator dies mid-epoch), the client's query fails, a new client restarts it from the
  checkpoint, and every record is in the topic once;
* aligned ``PostgresSink`` (two-phase commit) killed after its commit decision was logged,
  restarted: the table holds every record once, no prepared transaction is left;
* after that restart, a new checkpoint with the same ``sink_id`` is refused
  (``StageCode.QUERY_MISMATCH``), and the old checkpoint is accepted again afterwards (in
  the same test: the restarted run is the bound query); a sink without
  ``checkpoint_location`` is refused in a Connect ``foreachBatch``
  (``StageCode.SPARK_CONNECT``);
* the aligned sink called from the client on a batch DataFrame, without ``parallelism``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka import KafkaEpochLog
from connectors.verify import check_exactly_once, produce_input, read_committed_topic
from integration_tests.connect.conftest import run_client
from integration_tests.e2e._table_side import TableSide
from txn import EpochHistory

pytestmark = [pytest.mark.connect, pytest.mark.spark, pytest.mark.timeout(1200)]

RECORDS = 200
PER_BATCH = RECORDS // 4  # four epochs per run of the whole input
CONNECT_PARALLELISM = 2  # the test server's master is local[2]


def _history(bootstrap: str, sink_id: str) -> EpochHistory:
    log = KafkaEpochLog(bootstrap, sink_id, create_topic=False)
    try:
        return log.load()
    finally:
        log.close()


def _query_id(checkpoint: Path) -> str:
    doc: dict[str, str] = json.loads((checkpoint / "metadata").read_text().splitlines()[0])
    return doc["id"]


def _kill_plan(tmp_path: Path, step: str, epoch: int) -> str:
    plan = tmp_path / "faults.json"
    fault = {"id": "kill-coordinator", "step": step, "epoch": epoch, "action": "kill", "times": 1}
    plan.write_text(json.dumps([fault]))
    return str(plan)


def _config(
    tmp_path: Path, bootstrap: str, inp: str, out: str, sink_id: str, **extra: Any
) -> dict[str, Any]:
    return {
        "bootstrap": bootstrap,
        "input_dir": str(tmp_path / "unused"),
        "checkpoint": str(tmp_path / "checkpoint"),
        "output_topic": out,
        "sink_id": sink_id,
        "mode": "aligned",
        "parallelism": None,  # the default: from the Connect server's configuration
        "source": "kafka",
        "input_topic": inp,
        "max_offsets_per_trigger": PER_BATCH,
        **extra,
    }


def test_aligned_kafka_sink_killed_restarted_then_bound_to_its_checkpoint(
    connect_url: str, tmp_path: Path, kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    inp, out = new_topic("cx-in", partitions=2), new_topic("cx-out", partitions=3)
    produce_input(kafka_bootstrap, inp, RECORDS)
    sink_id = f"cx-{uuid.uuid4().hex[:10]}"
    plan = _kill_plan(tmp_path, "driver_after_stage", 1)
    cfg = _config(tmp_path, kafka_bootstrap, inp, out, sink_id, fault_plan=plan)

    first = run_client(connect_url, "pipeline", cfg, tmp_path / "run1.log")
    assert not first["ok"], first  # the coordinator's process died: the query failed
    assert Path(f"{plan}.kill-coordinator.0").exists()
    killed = _history(kafka_bootstrap, sink_id)
    assert [p.epoch for p in killed.in_doubt()] == [1]  # committed in Kafka, not logged

    second = run_client(connect_url, "pipeline", cfg, tmp_path / "run2.log")
    assert second == {"ok": True}

    report = check_exactly_once(kafka_bootstrap, input_topic=inp, output_topic=out, sink_id=sink_id)
    assert report.ok and report.committed_records == RECORDS, report.examples
    history = _history(kafka_bootstrap, sink_id)
    assert history.binding is not None
    assert history.binding.query_id == _query_id(tmp_path / "checkpoint")
    plans = [history.plan(e) for e in history.epochs()]
    assert len(plans) >= RECORDS // PER_BATCH
    assert all(p is not None and p.mode.value == "aligned" for p in plans)
    assert {p.parallelism for p in plans if p is not None} == {CONNECT_PARALLELISM}
    # The sink is now bound to this query: the next two runs prove the binding
    # (a query of its own would cost a third full run of the input).
    # One micro-batch per run from here on: the epochs' split is not what these runs prove.
    whole = {**cfg, "max_offsets_per_trigger": None}
    _new_checkpoint_refused_then_the_old_one_accepted(connect_url, tmp_path, whole)


def _new_checkpoint_refused_then_the_old_one_accepted(
    connect_url: str, tmp_path: Path, cfg: dict[str, Any]
) -> None:
    """After a run on ``cfg`` wrote all ``RECORDS``: a new checkpoint with its ``sink_id``
    is refused and writes nothing; the old checkpoint then reads RECORDS more exactly once."""
    bootstrap, inp, out, sink_id = (
        cfg[k] for k in ("bootstrap", "input_topic", "output_topic", "sink_id")
    )
    moved = {**cfg, "checkpoint": str(tmp_path / "new-checkpoint")}
    refused = run_client(connect_url, "pipeline", moved, tmp_path / "moved.log")
    assert not refused["ok"] and "[query-mismatch]" in refused["error"], refused
    assert len(read_committed_topic(bootstrap, out)) == RECORDS  # nothing more written

    produce_input(bootstrap, inp, RECORDS, start=RECORDS)
    assert run_client(connect_url, "pipeline", cfg, tmp_path / "again.log") == {"ok": True}
    report = check_exactly_once(bootstrap, input_topic=inp, output_topic=out, sink_id=sink_id)
    assert report.ok and report.committed_records == 2 * RECORDS, report.examples
    binding = _history(bootstrap, sink_id).binding
    assert binding is not None and binding.query_id == _query_id(tmp_path / "checkpoint")


def test_aligned_postgres_sink_killed_after_the_decision_and_restarted(
    connect_url: str,
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    postgres_dsn: str,
    schema: str,
) -> None:
    inp = new_topic("cx-pg-in", partitions=2)
    produce_input(kafka_bootstrap, inp, RECORDS)
    table = TableSide(postgres_dsn, schema).create()
    sink_id = f"{schema}-cx"
    plan = _kill_plan(tmp_path, "driver_after_decision", 1)
    cfg = _config(
        tmp_path,
        kafka_bootstrap,
        inp,
        "unused-topic",
        sink_id,
        sink="postgres",
        fault_plan=plan,
        **table.options("two-phase"),
    )

    first = run_client(connect_url, "pipeline", cfg, tmp_path / "run1.log")
    assert not first["ok"], first
    assert Path(f"{plan}.kill-coordinator.0").exists()
    assert {e for e, _ in table.prepared(sink_id)} == {1}  # decided, not delivered

    second = run_client(connect_url, "pipeline", cfg, tmp_path / "run2.log")
    assert second == {"ok": True}
    report = table.check(sink_id, None, bootstrap=kafka_bootstrap, input_topic=inp)
    assert report.ok and report.table_rows == RECORDS, report
    assert table.prepared(sink_id) == []


def test_foreach_batch_without_checkpoint_location_is_refused(
    connect_url: str, tmp_path: Path, kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    inp, out = new_topic("cx-in", partitions=2), new_topic("cx-out", partitions=3)
    produce_input(kafka_bootstrap, inp, RECORDS)
    sink_id = f"cx-{uuid.uuid4().hex[:10]}"
    cfg = _config(tmp_path, kafka_bootstrap, inp, out, sink_id)
    result = run_client(connect_url, "bare_pipeline", cfg, tmp_path / "client.log")
    assert not result["ok"] and "[spark-connect]" in result["error"], result
    assert "checkpoint_location" in result["error"]
    report = check_exactly_once(
        kafka_bootstrap, input_topic=inp, output_topic=out, sink_id=sink_id, allow_in_doubt=True
    )
    assert report.committed_records == 0 and report.uncommitted_records == 0


def test_aligned_sink_called_from_the_client_with_the_default_parallelism(
    connect_url: str, tmp_path: Path, kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    inp, out = new_topic("cx-in", partitions=2), new_topic("cx-out", partitions=3)
    produce_input(kafka_bootstrap, inp, RECORDS)
    sink_id = f"cx-{uuid.uuid4().hex[:10]}"
    args = {
        "bootstrap": kafka_bootstrap,
        "input_topic": inp,
        "output_topic": out,
        "sink_id": sink_id,
        "sink": {"mode": "aligned"},
    }
    result = run_client(connect_url, "sink_batch", args, tmp_path / "client.log")
    assert result == {
        "ok": True,
        "committed": True,
        "rows": RECORDS,
        "partitions": CONNECT_PARALLELISM,
    }
    report = check_exactly_once(kafka_bootstrap, input_topic=inp, output_topic=out, sink_id=sink_id)
    assert report.ok and report.committed_records == RECORDS, report.examples
