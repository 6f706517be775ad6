"""A PostgreSQL epoch log wedged by the current release recovers without manual repair.

Release 0.x made up PREPARED reports for an empty batch Spark ran no task for; the
coordinator logged a commit decision, and COMMIT PREPARED met neither the prepared
transaction nor a marker of the epoch (``TxnCode.PREPARED_WORK_LOST``) at every later
start. These tests write that state the way the release did (the epoch's plan and its
commit decision in the log, nothing prepared, the markers one epoch behind), then start a
new sink (or driver) and replay: the decision is kept, the lost partitions are redone, and
the output holds every row once (docs/architecture.md, "Lost prepared work").
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from psycopg import sql

from connectors.postgres import PostgresEpochLog, PostgresSink
from connectors.postgres._twophase import list_prepared
from integration_tests.postgres._queries import table_sink
from integration_tests.postgres._world import PG_LIKE, PgWorld
from txn import CommitMode, EpochLog, EpochState
from txn._model import EpochDecision
from txn.testing._crash import EMPTY


def wedge(log: EpochLog, epoch: int) -> None:
    """Log what release 0.x logged for an empty ``epoch``: its plan and a commit decision."""
    try:
        history = log.load()
        previous = history.plan(epoch - 1)
        assert previous is not None and history.is_committed(epoch - 1)
        log.append(dataclasses.replace(previous, epoch=epoch, attempt=0))
        log.append(EpochDecision(sink_id=previous.sink_id, epoch=epoch, commit=True))
        assert log.load().state(epoch) is EpochState.COMMIT_DECIDED
    finally:
        log.close()


@pytest.mark.parametrize("mode", list(CommitMode), ids=lambda m: m.value)
def test_a_wedged_log_recovers_on_the_coordinator(
    postgres_dsn: str, schema: str, mode: CommitMode
) -> None:
    world = PgWorld(lambda: postgres_dsn, schema, PG_LIKE, mode=mode, shape=EMPTY)
    world.create_table()
    world.run_epoch(0)
    world.crash()  # the driver of release 0.x stops; its log stays
    wedge(PostgresEpochLog(world.cfg()), 1)
    coordinator = world.start()
    assert coordinator.recover().awaiting_replay == (1,)
    world.run_epochs(3)  # the replay of batch 1 redoes both partitions, then batch 2
    world.check_exactly_once(3)
    history = world.history()
    world.close()
    plan, decision = history.plan(1), history.decision(1)
    assert plan is not None and plan.attempt == 1 and decision is not None and decision.commit


def ids(pg: Any, schema: str) -> Counter[int]:
    rows = pg.execute(sql.SQL("SELECT id FROM {}.t").format(sql.Identifier(schema))).fetchall()
    return Counter(int(r[0]) for r in rows)


@pytest.mark.spark
@pytest.mark.parametrize("mode", [m.value for m in CommitMode])
def test_a_wedged_log_recovers_in_a_new_sink(
    spark: Any,
    pg: Any,
    schema: str,
    postgres_dsn: str,
    mode: str,
    closing: Callable[[PostgresSink], PostgresSink],
) -> None:
    pg.execute(
        sql.SQL("CREATE TABLE {}.t (id bigint PRIMARY KEY, v text)").format(sql.Identifier(schema))
    )

    def new_sink() -> PostgresSink:
        return closing(table_sink(postgres_dsn, schema, commit_protocol="two-phase", mode=mode))

    def batch(start: int, end: int) -> Any:
        return spark.range(start, end, numPartitions=2).selectExpr("id", "concat('v', id) AS v")

    first = new_sink()
    try:
        assert first(batch(0, 30), 0).committed
    finally:
        first.close()
    wedge(first.connector.open_epoch_log(), 1)
    second = new_sink()  # a restart with the fixed release, from the same checkpoint
    try:
        replay = second(batch(0, 0), 1)  # Spark replays batch 1: empty
        assert replay.committed and not replay.skipped
        assert replay.plan is not None and replay.plan.attempt == 1
        assert second(batch(30, 50), 2).committed
        history = second.epoch_log_history()
    finally:
        second.close()
    assert all(history.is_committed(e) for e in range(3)), history
    decision = history.decision(1)
    assert decision is not None and decision.commit
    assert ids(pg, schema) == Counter(range(50))
    assert list_prepared(pg, f"{schema}-s") == []


HOLD_S = 30  # seconds the empty epoch's task is held at its vote; query.stop() comes first
STOP_WAIT_S = 120  # seconds to wait for the held epoch to start (a loaded machine is slow)


@pytest.mark.spark
@pytest.mark.parametrize(
    ("protocol", "mode"),
    [("two-phase", "aligned"), ("two-phase", "unaligned"), ("idempotency-table", "aligned")],
)
def test_query_stop_during_an_empty_epoch_then_restart(
    spark: Any,
    pg: Any,
    schema: str,
    postgres_dsn: str,
    tmp_path: Any,
    protocol: str,
    mode: str,
    closing: Callable[[PostgresSink], PostgresSink],
) -> None:
    """A streaming query stopped while its empty batch is in the write stage restarts from
    its checkpoint with a new sink object, and every row lands once."""
    import json
    import time

    from connectors.testing import FaultPlan, inject_faults

    pg.execute(
        sql.SQL("CREATE TABLE {}.t (id bigint PRIMARY KEY, v text)").format(sql.Identifier(schema))
    )
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()

    def add_file(name: str, ids: range) -> None:
        (source / name).write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))

    faults = tmp_path / "faults.json"
    faults.write_text(
        json.dumps(
            [
                {
                    "id": "hold",
                    "step": "after_pre_commit",
                    "epoch": 1,
                    "action": "sleep",
                    "seconds": HOLD_S,
                    "times": 1,
                }
            ]
        )
    )
    plan = FaultPlan(str(faults))

    def start(sink: PostgresSink) -> Any:
        stream = (
            spark.readStream.schema("id long")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
            .filter("id >= 0")
            .selectExpr("id", "concat('v', id) AS v")
        )
        return (
            stream.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    def new_sink(**extra: Any) -> PostgresSink:
        return closing(
            table_sink(postgres_dsn, schema, commit_protocol=protocol, mode=mode, **extra)
        )

    add_file("0.json", range(0, 10))
    first = new_sink()
    with inject_faults(plan):
        query = start(first)
        try:
            query.processAllAvailable()
            add_file("1.json", range(-5, 0))  # every row filtered out: an empty batch
            deadline = time.monotonic() + STOP_WAIT_S
            while not plan.has_fired("hold") and time.monotonic() < deadline:
                time.sleep(0.1)
            assert plan.has_fired("hold"), "the empty epoch never reached its vote"
        finally:
            query.stop()
            first.close()
    add_file("2.json", range(10, 20))
    second = new_sink()
    query = start(second)
    try:
        query.processAllAvailable()
        history = second.epoch_log_history()
    finally:
        query.stop()
        second.close()
    assert ids(pg, schema) == Counter(range(20))
    assert list_prepared(pg, f"{schema}-s") == []
    assert history.in_doubt() == [] and history.max_epoch() == 2, history
