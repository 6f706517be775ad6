"""End-to-end chaos tests of the table sinks: a Spark query writes a Delta or Iceberg table.

Same shape as test_pg_chaos.py: 400 input records in 4 chunk files (one epoch each), the
query runs as its own Spark application, a fault plan kills Python workers and the whole
application at the protocol's steps, the application is restarted from its checkpoint,
and the lake check (``connectors.verify.check_lake_table``) asserts every invariant at the
end: every input row once in the table, no vote record left in the staging area, every data
file on storage named by the table's log, the epoch log agreeing with the table's epochs.

One chain of application runs per format covers every driver step of the table commit (an
application run costs a JVM start, so each run ends with the next kill):

1. epoch 0: a Python worker killed in the middle of its write; epoch 1: a worker killed right
   after its pre-commit (its files and vote record written, the vote not sent), then the
   application killed once every partition is prepared, before the decision;
2. recovery rolls epoch 1 back (deletes its files), the replay writes it; the application is
   killed right after the commit decision of epoch 2 is logged, before the table commit;
3. recovery commits epoch 2 from the vote records (the replay of batch 2 is skipped); the
   application is killed after the first delivery of epoch 3, which committed the whole
   epoch to the table, before the completion is logged;
4. recovery finds epoch 3 in the table and completes it; the replay of batch 3 is skipped.

The composite (``kafka+delta``): the application killed with the topic side of an epoch
partly committed; the table never shows an epoch the topic lacks. (The Iceberg composite
shares every line of it but the table's commit, which the chain above covers;
integration_tests/lakehouse/test_table_with_kafka.py runs both composites through Spark with
the driver dying after the topic committed. One application run costs a JVM start.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.demo.app._config import ICEBERG_TABLE, lake_catalog, member_ids
from connectors.kafka import DEFAULT_EPOCH_LOG_TOPIC
from connectors.lakehouse import delta_table, iceberg_table
from connectors.lakehouse._table import TableFormat
from connectors.verify import (
    HistoryLike,
    TableReport,
    check_lake_table,
    load_history,
    member_history,
    print_report,
    read_committed_topic,
)
from integration_tests.e2e._scenario import CHUNK, N_RECORDS, Scenario, assert_exact, fired
from integration_tests.e2e._table_side import epochs_of, record_ids

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(900)]
pytest.importorskip("deltalake", reason="the table sinks need the [delta] extra")
pytest.importorskip("pyiceberg", reason="the table sinks need the [iceberg] extra")

EPOCHS = N_RECORDS // CHUNK
# Seconds the held Kafka task of the composite case sleeps (the application is killed long before).
HOLD_S = 240.0
# Kafka transaction timeout (ms) of the composite's killed run (its held partition's open
# transaction is aborted by the broker soon after the kill).
HELD_TXN_TIMEOUT_MS = 20_000


def lake(kind: str, path: Path) -> TableFormat:
    if kind == "delta":
        return delta_table(str(path / "delta"))
    return iceberg_table(ICEBERG_TABLE, "eos", lake_catalog(str(path)))


def check(
    table: TableFormat, sc: Scenario, sink_id: str, epoch_log: str | HistoryLike
) -> TableReport:
    report = check_lake_table(
        table, sink_id=sink_id, epoch_log=epoch_log, inputs=sc.inputs, allow_in_doubt=False
    )
    print_report(report)
    return report


def table_epochs(table: TableFormat, sc: Scenario) -> Counter[int]:
    epoch_of = {rid: i // CHUNK for i, rid in enumerate(record_ids(sc.inputs))}
    try:
        ids = [int(i) for i in table.read(["id"])["id"].to_pylist()]
    except Exception:  # noqa: BLE001 - no table yet: no epoch in it
        return Counter()
    return epochs_of(ids, epoch_of)


def staged(table: TableFormat, sink_id: str) -> list[tuple[int, int, bool]]:
    staging = table.staging(sink_id)
    return sorted(
        (r.epoch, r.partition, r.prepared) for e in staging.epochs() for r in staging.records(e)
    )


def kill(step: str, epoch: int) -> dict[str, Any]:
    return {"id": "app", "step": step, "epoch": epoch, "action": "kill"}


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_workers_and_the_application_killed_at_every_commit_step(
    kafka_bootstrap: str, tmp_path: Path, new_topic: Callable[..., str], kind: str
) -> None:
    sc = Scenario.create(kafka_bootstrap, tmp_path, new_topic)
    sc.stage()
    path = tmp_path / "lake"
    table = lake(kind, path)
    epoch_log = f"{path}/{sc.sink_id}.epochlog"
    options = {"sink": kind, "lake_path": str(path), "stage_retries": 2}
    workers = [
        {"id": "mid", "step": "mid_write", "epoch": 0, "partition": 0, "action": "kill",
         "after_rows": 10, "times": 1},
        {"id": "prep", "step": "after_pre_commit", "epoch": 1, "partition": 1, "action": "kill",
         "times": 1},
    ]  # fmt: skip
    # 1. Workers killed in epochs 0 and 1; the application killed before epoch 1's decision.
    plan = sc.fault_plan([*workers, kill("driver_before_complete", 1)], "first")
    first = sc.run(sc.config(fault_plan=plan, **options), "first", expect=-9)
    assert fired(plan, "mid") == 1 and fired(plan, "prep") == 1 and fired(plan, "app") == 1
    assert [e.epoch for e in first.epochs] == [0]
    assert table_epochs(table, sc) == Counter({0: CHUNK})
    # Prepared, no decision; partition 1 twice: the killed worker's vote record (its files
    # written, its vote never sent) and the re-run's. Recovery deletes both with their files.
    assert staged(table, sc.sink_id) == [(1, 0, True), (1, 1, True), (1, 1, True)]
    stuck = check(table, sc, sc.sink_id, epoch_log)
    assert not stuck.ok and stuck.table_rows == CHUNK
    # 2. Killed right after the commit decision of epoch 2 is logged.
    plan = sc.fault_plan([kill("driver_after_decision", 2)], "second")
    second = sc.run(sc.config(fault_plan=plan, **options), "second", expect=-9)
    assert fired(plan, "app") == 1
    assert [(e.epoch, e.skipped) for e in second.epochs] == [(1, False)]
    assert table_epochs(table, sc) == Counter({0: CHUNK, 1: CHUNK})
    assert staged(table, sc.sink_id) == [(2, 0, True), (2, 1, True)]
    # 3. Recovery commits epoch 2 from its vote records; killed once epoch 3's first
    #    delivery committed the whole epoch to the table, before its completion is logged.
    plan = sc.fault_plan([kill("driver_after_partition_delivered", 3)], "third")
    third = sc.run(sc.config(fault_plan=plan, **options), "third", expect=-9)
    assert fired(plan, "app") == 1
    assert [(e.epoch, e.skipped) for e in third.epochs] == [(2, True)]
    assert table_epochs(table, sc) == Counter(dict.fromkeys(range(EPOCHS), CHUNK))
    # 4. Recovery finds epoch 3 in the table and completes it; the replay is skipped.
    fourth = sc.run(sc.config(**options), "fourth")
    assert [(e.epoch, e.skipped) for e in fourth.epochs] == [(3, True)]
    report = check(table, sc, sc.sink_id, epoch_log)
    assert report.ok, [(a.kind.value, a.record_id, a.detail) for a in report.examples]
    assert report.table_rows == report.input_records == N_RECORDS
    assert staged(table, sc.sink_id) == []


@pytest.mark.parametrize("kind", ["delta"])
def test_application_killed_mid_epoch_keeps_the_table_behind_the_topic(
    kafka_bootstrap: str, tmp_path: Path, new_topic: Callable[..., str], kind: str
) -> None:
    sc = Scenario.create(kafka_bootstrap, tmp_path, new_topic)
    sc.stage()
    path = tmp_path / "lake"
    table = lake(kind, path)
    sink = f"kafka+{kind}"
    kafka_id, lake_id = member_ids(sc.sink_id, sink)
    epoch_log = f"{tmp_path}/{sc.sink_id}.epochlog"
    epoch_of = {rid: i // CHUNK for i, rid in enumerate(record_ids(sc.inputs))}

    def topic_epochs() -> Counter[int]:
        return epochs_of(record_ids(read_committed_topic(sc.bootstrap, sc.output_topic)), epoch_of)

    # Two write partitions per sink, aligned, all four tasks at once: in epoch 1 every task
    # votes yes (the table's: files and vote records prepared), Kafka partition 1 is held
    # before its commit, Kafka partition 0 commits and then SIGKILLs the whole application.
    options = {
        "sink": sink,
        "lake_path": str(path),
        "parallelism": 2,
        "master": "local[4,4]",
        "epoch_log": epoch_log,
    }
    plan = sc.fault_plan(
        [
            {"id": "hold", "step": "before_commit", "epoch": 1, "partition": 1,
             "action": "sleep", "seconds": HOLD_S},
            {"id": "wait", "step": "before_commit", "epoch": 1, "partition": 0,
             "action": "await", "waits_for": "hold", "seconds": HOLD_S},
            {"id": "kill_app", "step": "after_commit", "epoch": 1, "partition": 0,
             "action": "kill_app"},
        ]
    )  # fmt: skip
    config = sc.config(
        fault_plan=plan, stage_retries=0, transaction_timeout_ms=HELD_TXN_TIMEOUT_MS, **options
    )
    first = sc.run(config, "first", expect=-9)
    assert fired(plan, "kill_app") == 1 and fired(plan, "hold") == 1, "the kill never happened"
    assert [e.epoch for e in first.epochs] == [0]
    in_topic, in_table = topic_epochs(), table_epochs(table, sc)
    assert in_table == Counter({0: CHUNK})
    assert 0 < in_topic[1] < CHUNK, in_topic  # partly committed on the topic side
    assert staged(table, lake_id) == [(1, 0, True), (1, 1, True)]
    # A new application: recovery rolls the table's epoch 1 back (no decision was logged);
    # the replay completes the topic and commits the table after it.
    second = sc.run(sc.config(**options), "second")
    assert [e.epoch for e in second.epochs] == list(range(1, EPOCHS))
    both = Counter(dict.fromkeys(range(EPOCHS), CHUNK))
    assert topic_epochs() == both and table_epochs(table, sc) == both
    history = load_history(sc.bootstrap, sc.sink_id, epoch_log, DEFAULT_EPOCH_LOG_TOPIC)
    shared = member_history(history, members=2)
    assert_exact(sc.check(sink_id=kafka_id, epoch_log=shared))
    report = check(table, sc, lake_id, shared)
    assert report.ok, [(a.kind.value, a.record_id, a.detail) for a in report.examples]
    assert staged(table, lake_id) == []
