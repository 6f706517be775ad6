"""End-to-end chaos tests: a Spark streaming query writes through PostgresSink while faults hit.

Same shape as test_chaos.py (the Kafka sink): 400 input records in 4 chunk files (one epoch
each), the query runs as its own Spark application, a fault plan kills a Python worker, a
task or the whole application at a protocol step (or the test restarts PostgreSQL), the
application is restarted from its checkpoint when it died, and then the table check asserts
every invariant: every input row exactly once in the table, nothing of the sink left in
``pg_prepared_xacts``, the epoch log table agreeing with the idempotency table.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from connectors.demo.app import AppProcess, EpochLine
from connectors.testing.postgres import start_postgres_server
from connectors.verify import AnomalyKind, TableReport
from integration_tests.e2e._scenario import (
    APP_RUN_TIMEOUT_S,
    CHUNK,
    N_RECORDS,
    Scenario,
    fired,
    wait_until,
)
from integration_tests.e2e._table_side import TableSide, epochs_of, record_ids, sibling_schema
from integration_tests.e2e._together import Case, run_cases

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(900)]

# Seconds the driver is held after every partition prepared while the test restarts
# PostgreSQL (a restart takes a few seconds; the rest is slack for a busy machine).
HOLD_FOR_RESTART_S = 12.0


def pg_scenario(
    bootstrap: str,
    tmp: Path,
    new_topic: Callable[..., str],
    dsn: str,
    schema: str,
    *,
    create: bool = True,
) -> tuple[Scenario, TableSide]:
    """The input staged, the table side (its table created unless ``create`` is False)."""
    sc = Scenario.create(bootstrap, tmp, new_topic)
    sc.sink_id = f"{schema}-pg"  # the schema fixture rolls back this sink's prepared leftovers
    sc.stage()
    table = TableSide(dsn, schema)
    return sc, table.create() if create else table


@pytest.fixture
def world(
    kafka_bootstrap: str,
    tmp_path: Path,
    new_topic: Callable[..., str],
    postgres_dsn: str,
    schema: str,
) -> tuple[Scenario, TableSide]:
    return pg_scenario(kafka_bootstrap, tmp_path, new_topic, postgres_dsn, schema)


def assert_exact(report: TableReport) -> None:
    """Every table invariant, and every input row in the table."""
    assert report.epoch_log_checked, report.notes
    assert report.ok, [(a.kind.value, a.record_id, a.detail) for a in report.examples]
    assert report.table_rows == report.input_records == N_RECORDS
    assert report.prepared == ()


def table_epochs(sc: Scenario, table: TableSide) -> Counter[int]:
    """Rows per input epoch in the table (epoch k = chunk file k)."""
    epoch_of = {rid: i // CHUNK for i, rid in enumerate(record_ids(sc.inputs))}
    return epochs_of(table.ids(), epoch_of)


# Both protocols' cases share one application run (``_together``): each its own schema,
# table, sink id, input and fault plan; a killed Python worker ends only its own task.
PROTOCOL_CASES = [("aligned", "two-phase"), ("unaligned", "idempotency-table")]


def test_python_workers_killed_mid_write_and_after_prepare(
    kafka_bootstrap: str,
    tmp_path: Path,
    new_topic: Callable[..., str],
    postgres_dsn: str,
    schema: str,
) -> None:
    with sibling_schema(postgres_dsn, schema, "b") as second:
        cases = {}
        for (mode, protocol), name in zip(PROTOCOL_CASES, (schema, second), strict=True):
            sc, table = pg_scenario(
                kafka_bootstrap, tmp_path / protocol, new_topic, postgres_dsn, name
            )
            cases[f"{mode}-{protocol}"] = workers_killed_case(sc, table, mode, protocol)
        run_cases(cases, tmp_path / "apps", APP_RUN_TIMEOUT_S)


def workers_killed_case(sc: Scenario, table: TableSide, mode: str, protocol: str) -> Case:
    # Epoch 1: a worker dies in the middle of its COPY (transaction open). Epoch 2: a
    # worker dies right after pre-commit (two-phase: its work PREPAREd, the vote not sent;
    # idempotency table: data and marker written, not committed). The query must finish on
    # its own: Spark retries the task (unaligned) or the sink re-runs the barrier stage
    # (aligned); the new attempt's open() fences the dead session and rolls back its
    # prepared transaction.
    plan = sc.fault_plan(
        [
            {
                "id": "mid",
                "step": "mid_write",
                "epoch": 1,
                "partition": 0,
                "action": "kill",
                "after_rows": 10,
                "times": 1,
            },
            {
                "id": "prep",
                "step": "after_pre_commit",
                "epoch": 2,
                "partition": 1,
                "action": "kill",
                "times": 1,
            },
        ]
    )

    def check(_epochs: Sequence[EpochLine]) -> None:
        assert fired(plan, "mid") == 1 and fired(plan, "prep") == 1, "a kill never fired"
        assert_exact(table.check(sc.sink_id, sc.inputs))

    config = sc.config(
        sink="postgres", fault_plan=plan, mode=mode, stage_retries=2, **table.options(protocol)
    )
    return Case(config, check)


def test_application_killed_before_and_after_the_commit_decision(
    world: tuple[Scenario, TableSide],
) -> None:
    sc, table = world
    options = {"sink": "postgres", **table.options("two-phase")}
    # 1. The driver is SIGKILLed once every partition of epoch 1 PREPAREd and reported,
    #    before the decision is logged: both prepared transactions are left in the server,
    #    the table shows epoch 0 only, and the checker reports the epoch in doubt.
    before = sc.fault_plan(
        [{"id": "d", "step": "driver_before_complete", "epoch": 1, "action": "kill"}], "before"
    )
    first = sc.run(sc.config(fault_plan=before, **options), "first", expect=-9)
    assert fired(before, "d") == 1 and [e.epoch for e in first.epochs] == [0]
    assert table.prepared(sc.sink_id) == [(1, 0), (1, 1)]
    assert table_epochs(sc, table) == Counter({0: CHUNK})
    stuck = table.check(sc.sink_id, sc.inputs)
    assert stuck.count(AnomalyKind.IN_DOUBT_EPOCH) == 1
    assert stuck.count(AnomalyKind.OPEN_TRANSACTION) == 2
    assert stuck.count(AnomalyKind.LOST) == N_RECORDS - CHUNK
    # 2. A new application: recovery finds no decision for epoch 1 and rolls it back; the
    #    replay writes it again. Then the driver is SIGKILLed right after logging the commit
    #    decision of epoch 2, before any COMMIT PREPARED.
    after = sc.fault_plan(
        [{"id": "d", "step": "driver_after_decision", "epoch": 2, "action": "kill"}], "after"
    )
    second = sc.run(sc.config(fault_plan=after, **options), "second", expect=-9)
    assert fired(after, "d") == 1
    assert [(e.epoch, e.skipped) for e in second.epochs] == [(1, False)]
    assert table.prepared(sc.sink_id) == [(2, 0), (2, 1)]
    assert table_epochs(sc, table) == Counter({0: CHUNK, 1: CHUNK})
    # 3. A new application: recovery commits epoch 2 from the logged decision, so the
    #    replayed batch 2 is skipped; epoch 3 is written.
    third = sc.run(sc.config(**options), "third")
    assert [(e.epoch, e.skipped) for e in third.epochs] == [(2, True), (3, False)]
    assert_exact(table.check(sc.sink_id, sc.inputs))


@pytest.fixture
def own_server() -> Iterator[Any]:
    if os.environ.get("POSTGRES_DSN"):
        pytest.skip(
            "restarts PostgreSQL: needs a server the test owns, and POSTGRES_DSN names "
            "an external one"
        )
    with start_postgres_server() as server:
        yield server


def test_postgres_restarted_between_prepare_and_commit(
    kafka_bootstrap: str, tmp_path: Path, new_topic: Callable[..., str], own_server: Any
) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(own_server.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA s"))
    sc, table = pg_scenario(kafka_bootstrap, tmp_path, new_topic, own_server.dsn, "s")
    # The driver is held after every partition of epoch 1 PREPAREd and reported, before the
    # decision; meanwhile the server restarts (clean stop: sessions end, prepared
    # transactions survive). Then the driver logs the decision in the epoch log table
    # (session reopened) and COMMIT PREPAREs through a new connection.
    plan = sc.fault_plan(
        [
            {
                "id": "hold",
                "step": "driver_before_complete",
                "epoch": 1,
                "action": "sleep",
                "seconds": HOLD_FOR_RESTART_S,
            }
        ]
    )
    app = AppProcess(
        sc.config(sink="postgres", fault_plan=plan, **table.options("two-phase")),
        tmp_path / "apps",
        "run",
    ).start()
    assert wait_until(lambda: fired(plan, "hold") == 1), app.stderr_tail()
    assert table.prepared(sc.sink_id) == [(1, 0), (1, 1)]
    own_server.restart()
    assert table.prepared(sc.sink_id) == [(1, 0), (1, 1)]  # survived the restart
    assert app.wait() == 0, app.failure_summary()
    assert [e.epoch for e in app.epochs] == [0, 1, 2, 3]
    assert_exact(table.check(sc.sink_id, sc.inputs))
