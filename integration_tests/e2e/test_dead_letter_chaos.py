"""End-to-end: bad records dead-lettered exactly once across an application kill and a replay.

One epoch holds the input topic's records plus two bad ones: a null value and an oversized
record (Kafka: larger than the producers' ``message.max.bytes``; PostgreSQL: a key longer
than its ``varchar`` column). The query runs with ``on_bad_record="dead-letter"`` as its own
Spark application (``connectors.demo.app``); a fault plan SIGKILLs the whole application in
the middle of the epoch, a new application replays it from the checkpoint (the four cases'
replays side by side in one application, ``_together``), and then:

* every good row is in the output topic / table exactly once (the checkers);
* exactly the two bad records are in the dead-letter topic (``read_committed``) / table,
  once each, with their error class and write partition.

The two bad records are routed to different write partitions (asserted from their dead
letters): the null value to partition 0, which commits before the kill (Kafka, idempotency
table; its replay only compares its marker), the oversized one to partition 1, whose
transaction dies with the application and is written again by the replay.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from connectors.demo.app import EpochLine, PipelineConfig
from connectors.demo.app._chunks import write_chunks
from connectors.verify import Record
from integration_tests.e2e._cases import HOLD_S, IN_FLIGHT_S
from integration_tests.e2e._scenario import APP_RUN_TIMEOUT_S, Scenario, assert_exact, fired
from integration_tests.e2e._table_side import TABLE, TableSide, sibling_schema
from integration_tests.e2e._together import Case, run_cases
from integration_tests.kafka_sink._support import lso_reaches_high_watermark, read_committed

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(900)]

N = 40
# The producers' message.max.bytes; the oversized record's value is well above it.
MAX_BYTES = 100_000
# The PostgreSQL table's key column is varchar(KEY_CHARS); the oversized record's key is longer.
KEY_CHARS = 64
# Keys chosen so that the stage routes the null value to write partition 0 and the oversized
# record to write partition 1 (Kafka: by key; the PostgreSQL table without key columns: by
# every column): checked below through each dead letter's write partition.
NULL_KEY = "dlq-null-2"
BIG_KEY = "dlq-big-3-" + "x" * 90
BAD_OFFSET = 1_000_000
# In this order: the Kafka cases' killed runs last, so their replays start soon after the
# kill, well within the open transaction's timeout (the replay aborts it, as in production).
CASES = ["pg-two-phase", "pg-idempotency", "kafka-aligned", "kafka-unaligned"]


def bad_records(topic: str) -> list[Record]:
    """The null value (input partition 0) and the oversized record (input partition 1)."""
    big = {"id": BAD_OFFSET, "key": BIG_KEY, "seq": 0, "pad": "x" * (MAX_BYTES + 50_000)}
    return [
        Record(topic=topic, partition=0, offset=BAD_OFFSET, key=NULL_KEY.encode(), value=None),
        Record(
            topic=topic,
            partition=1,
            offset=BAD_OFFSET,
            key=BIG_KEY.encode(),
            value=json.dumps(big).encode(),
        ),
    ]


def kill_after_partition_0_committed(sc: Scenario, unaligned: bool) -> str:
    """Plan: write partition 1 held (unaligned: mid-write; aligned: pre-committed), partition
    0 commits, then SIGKILLs the application (as ``_cases``, for epoch 0)."""
    hold: dict[str, Any] = (
        {"step": "mid_write", "after_rows": 5} if unaligned else {"step": "before_commit"}
    )
    in_flight = {
        "id": "in_flight",
        "step": "before_commit",
        "epoch": 0,
        "partition": 0,
        "action": "sleep",
        "seconds": IN_FLIGHT_S,
    }
    return sc.fault_plan(
        [
            {
                "id": "hold",
                "epoch": 0,
                "partition": 1,
                "action": "sleep",
                "seconds": HOLD_S,
                **hold,
            },
            {
                "id": "wait",
                "step": "before_commit",
                "epoch": 0,
                "partition": 0,
                "action": "await",
                "waits_for": "hold",
                "seconds": HOLD_S,
            },
            *([in_flight] if unaligned else []),
            {
                "id": "kill",
                "step": "after_commit",
                "epoch": 0,
                "partition": 0,
                "action": "kill_app",
            },
        ]
    )


def kill_before_the_decision(sc: Scenario) -> str:
    """Plan: the driver SIGKILLed once both partitions PREPAREd, before the decision is logged."""
    return sc.fault_plan(
        [{"id": "kill", "step": "driver_before_complete", "epoch": 0, "action": "kill"}]
    )


def killed(sc: Scenario, first: PipelineConfig) -> None:
    """Run ``first`` until the kill (its replay comes later, from the same checkpoint)."""
    assert first.fault_plan is not None
    app = sc.run(first, "first", expect=-9)
    assert fired(first.fault_plan, "kill") == 1, "the kill never fired: the test proved nothing"
    assert app.epochs == [], "epoch 0 finished before the kill"


def replayed(epochs: Sequence[EpochLine]) -> None:
    assert [(e.epoch, e.skipped) for e in epochs] == [(0, False)]


def test_bad_records_are_dead_lettered_once_across_a_kill_and_a_replay(
    kafka_bootstrap: str,
    tmp_path: Path,
    new_topic: Callable[..., str],
    postgres_dsn: str,
    schema: str,
    producer_strategy: str,
) -> None:
    # Each case's first application is killed on its own; then the four replays run side
    # by side in one application (``_together``), each from its own checkpoint with its
    # own topics, sink id and check. The PostgreSQL cases run once (the Kafka producer
    # strategy is not theirs: with the pooled one).
    with sibling_schema(postgres_dsn, schema, "b") as second:
        schemas = iter((schema, second))
        replays: dict[str, Case] = {}
        for case in _cases_of(producer_strategy):
            sc = Scenario.create(
                kafka_bootstrap,
                tmp_path / case,
                new_topic,
                n=N,
                producer_strategy=producer_strategy,
            )
            write_chunks([*sc.inputs, *bad_records(sc.input_topic)], sc.input_dir, N + 2)
            if case.startswith("kafka"):
                replays[case] = kafka_case(sc, case.removeprefix("kafka-"))
            else:
                table = TableSide(postgres_dsn, next(schemas))
                replays[case] = pg_case(sc, table, case.removeprefix("pg-"))
        run_cases(replays, tmp_path / "apps", APP_RUN_TIMEOUT_S)


def _cases_of(producer_strategy: str) -> list[str]:
    """The cases of ``CASES`` that use the Kafka sink's ``producer_strategy``."""
    return [c for c in CASES if producer_strategy == "pooled" or c.startswith("kafka")]


def kafka_case(sc: Scenario, mode: str) -> Case:
    plan = kill_after_partition_0_committed(sc, unaligned=mode == "unaligned")
    options: dict[str, Any] = {
        "mode": mode,
        "on_bad_record": "dead-letter",
        "producer_config": {"message.max.bytes": str(MAX_BYTES)},
    }
    killed(sc, sc.config(fault_plan=plan, stage_retries=0, **options))
    assert fired(plan, "hold") == 1 and fired(plan, "wait") == 1

    def check(epochs: Sequence[EpochLine]) -> None:
        replayed(epochs)
        assert_exact(sc.check())
        dlq = f"{sc.output_topic}.dlq"
        letters = sorted(read_committed(sc.bootstrap, dlq), key=lambda r: r.key or b"")
        found = [
            (r.key, r.value is None, *(dict(r.headers)[h] for h in KAFKA_HEADERS)) for r in letters
        ]
        assert found == [
            (BIG_KEY.encode(), False, b"record-too-large", b"0", b"0", b"1"),
            (NULL_KEY.encode(), True, b"record", b"0", b"0", b"0"),
        ], found
        assert lso_reaches_high_watermark(sc.bootstrap, dlq)

    return Case(sc.config(**options), check)


KAFKA_HEADERS = (
    "eos.dlq.error.class",
    "eos.dlq.batch.id",
    "eos.dlq.epoch",
    "eos.dlq.write.partition",
)


def pg_case(sc: Scenario, table: TableSide, protocol: str) -> Case:
    sc.sink_id = f"{table.schema}-pg"  # the schema fixture rolls back this sink's leftovers
    table.create()
    with psycopg.connect(table.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER TABLE {}.{} ALTER COLUMN key TYPE varchar({})").format(
                sql.Identifier(table.schema), sql.Identifier(TABLE), sql.Literal(KEY_CHARS)
            )
        )
    two_phase = protocol == "two-phase"
    options: dict[str, Any] = {
        "sink": "postgres",
        "mode": "aligned" if two_phase else "unaligned",
        "on_bad_record": "dead-letter",
        **table.options("two-phase" if two_phase else "idempotency-table"),
    }
    plan = kill_before_the_decision(sc) if two_phase else kill_after_partition_0_committed(sc, True)
    killed(sc, sc.config(fault_plan=plan, stage_retries=0, **options))

    def check(epochs: Sequence[EpochLine]) -> None:
        replayed(epochs)
        report = table.check(sc.sink_id, sc.inputs)
        assert report.epoch_log_checked, report.notes
        assert report.ok, [(a.kind.value, a.record_id, a.detail) for a in report.examples]
        assert report.table_rows == report.input_records == N
        assert report.prepared == ()
        with psycopg.connect(table.dsn, autocommit=True) as conn:
            rows = conn.execute(
                sql.SQL(
                    "SELECT record->>'key', record->>'id', error_class, batch_id, epoch,"
                    " write_partition, sink_id FROM {}.dead_letters ORDER BY 1"
                ).format(sql.Identifier(table.schema))
            ).fetchall()
        assert [tuple(r) for r in rows] == [
            (BIG_KEY, str(BAD_OFFSET), "value-too-large", 0, 0, 1, sc.sink_id),
            (NULL_KEY, None, "constraint-violation", 0, 0, 0, sc.sink_id),
        ], rows

    return Case(sc.config(**options), check)
