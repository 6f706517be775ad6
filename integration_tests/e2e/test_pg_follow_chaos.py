"""A table that follows the stream, killed between its ALTER TABLE and the epoch's commit.

The query (its own Spark application, ``connectors.demo.app``) writes 4 chunk files into a
table the sink creates (``create_table``); from batch 2 on its rows gain a column
(``evolve_schema`` adds it before epoch 2's plan is logged). The application is SIGKILLed
inside epoch 2, after the ALTER and before the epoch committed everywhere:

* two-phase, aligned: right after the commit decision is logged, before any COMMIT
  PREPARED (the epoch is prepared on both partitions, invisible);
* idempotency table, unaligned: right after partition 0 committed its part, while
  partition 1 is held before its commit (the epoch is partly visible).

A new application from the same checkpoint recovers and replays (both cases' replays side
by side in one application): the table check
(``connectors.verify.check_table``) finds every input row exactly once, the epoch log agrees
with the markers, and the replayed epoch wrote the layout it was planned with: every row of
epochs 2 and 3 carries the gained column, no earlier row does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from connectors.demo.app import EpochLine
from connectors.postgres._schema import describe_table
from integration_tests.e2e._scenario import APP_RUN_TIMEOUT_S, CHUNK, N_RECORDS, Scenario, fired
from integration_tests.e2e._table_side import (
    TABLE,
    TableSide,
    epochs_of,
    record_ids,
    sibling_schema,
)
from integration_tests.e2e._together import Case, run_cases
from integration_tests.e2e.test_pg_chaos import assert_exact, pg_scenario

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(900)]

# The epoch whose rows gain the column (and whose run is killed).
GAIN = 2
# Seconds partition 1 is held before its commit while partition 0 commits and kills the app.
HOLD_S = 60

KILLS: dict[str, list[dict[str, Any]]] = {
    "two-phase": [{"id": "kill", "step": "driver_after_decision", "epoch": GAIN, "action": "kill"}],
    "idempotency-table": [
        {
            "id": "hold",
            "step": "before_commit",
            "epoch": GAIN,
            "partition": 1,
            "action": "sleep",
            "seconds": HOLD_S,
        },
        {
            "id": "wait",
            "step": "before_commit",
            "epoch": GAIN,
            "partition": 0,
            "action": "await",
            "waits_for": "hold",
            "seconds": HOLD_S,
        },
        {"id": "kill", "step": "after_commit", "epoch": GAIN, "partition": 0, "action": "kill_app"},
    ],
}


def gained(table: TableSide) -> dict[int, tuple[int, int | None]]:
    """id -> (seq, seq10) of every row."""
    with psycopg.connect(table.dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, seq, seq10 FROM {}.{}").format(
                sql.Identifier(table.schema), sql.Identifier(TABLE)
            )
        ).fetchall()
    return {int(i): (int(s), None if g is None else int(g)) for i, s, g in rows}


def column_names(table: TableSide) -> list[str]:
    with psycopg.connect(table.dsn, autocommit=True) as conn:
        return [c.name for c in describe_table(conn, table.schema, TABLE).columns]


CASES = [("aligned", "two-phase"), ("unaligned", "idempotency-table")]


def test_killed_between_the_alter_and_the_commit_then_replayed(
    kafka_bootstrap: str,
    tmp_path: Path,
    new_topic: Callable[..., str],
    postgres_dsn: str,
    schema: str,
) -> None:
    # Each case's first application is killed on its own; then both replays run side by
    # side in one application (``_together``), each in its own schema, with its own check.
    with sibling_schema(postgres_dsn, schema, "b") as second:
        replays: dict[str, Case] = {}
        for (mode, protocol), name in zip(CASES, (schema, second), strict=True):
            # No table: the sink creates it.
            sc, table = pg_scenario(
                kafka_bootstrap, tmp_path / protocol, new_topic, postgres_dsn, name, create=False
            )
            replays[f"{mode}-{protocol}"] = killed_after_the_alter(sc, table, mode, protocol)
        run_cases(replays, tmp_path / "apps", APP_RUN_TIMEOUT_S)


def killed_after_the_alter(sc: Scenario, table: TableSide, mode: str, protocol: str) -> Case:
    """Run the first application until its kill in epoch 2; return the replay as a case."""
    options = {
        "sink": "postgres",
        "mode": mode,
        "postgres_create_table": True,
        "postgres_evolve_schema": True,
        "postgres_gained_columns": ("seq * 10 AS seq10",),
        "postgres_gain_from_batch": GAIN,
        **table.options(protocol),
    }
    plan = sc.fault_plan(KILLS[protocol])
    first = sc.run(sc.config(fault_plan=plan, stage_retries=0, **options), "first", expect=-9)
    assert fired(plan, "kill") == 1, first.failure_summary()
    assert [e.epoch for e in first.epochs] == list(range(GAIN))
    # The ALTER committed before epoch 2's plan was logged; the epoch is not committed.
    assert column_names(table) == ["id", "key", "seq", "seq10"]
    epoch_of = {rid: i // CHUNK for i, rid in enumerate(record_ids(sc.inputs))}
    shown = epochs_of(table.ids(), epoch_of)
    if protocol == "two-phase":
        assert table.prepared(sc.sink_id) == [(GAIN, 0), (GAIN, 1)]
        assert shown == Counter(dict.fromkeys(range(GAIN), CHUNK))
    else:
        assert 0 < shown[GAIN] < CHUNK, shown  # partition 0's part only

    # A new application: recovery, then the replay of epoch 2 with the layout it was planned
    # with (a different one would be refused: the layout is in the plan's fingerprint).
    def check(epochs: Sequence[EpochLine]) -> None:
        replayed = [(e.epoch, e.skipped) for e in epochs]
        assert replayed == [(GAIN, protocol == "two-phase"), (GAIN + 1, False)]
        assert_exact(table.check(sc.sink_id, sc.inputs))
        assert column_names(table) == ["id", "key", "seq", "seq10"]
        rows = gained(table)
        assert len(rows) == N_RECORDS
        for rid, (seq, seq10) in rows.items():
            assert seq10 == (seq * 10 if epoch_of[rid] >= GAIN else None), (rid, seq, seq10)

    return Case(sc.config(**options), check)
