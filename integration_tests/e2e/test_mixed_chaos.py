"""End-to-end chaos test of one epoch across Kafka and PostgreSQL (``sink="kafka+postgres"``).

The query writes every micro-batch to the output topic and to the table in one epoch
(``CompositeSink``: Kafka commits in its tasks, PostgreSQL is prepared and committed by
the coordinator only after every Kafka partition committed). The whole application is
SIGKILLed in the middle of an epoch, with the topic side partly committed; at the restart
the table must not show an epoch the topic does not fully hold, and after recovery both
hold exactly the same epochs, every row once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from connectors.demo.app._config import member_ids
from connectors.kafka import DEFAULT_EPOCH_LOG_TOPIC, read_markers
from connectors.verify import load_history, member_history, read_committed_topic
from integration_tests.e2e._scenario import CHUNK, N_RECORDS, Scenario, assert_exact, fired
from integration_tests.e2e._table_side import TableSide, epochs_of, record_ids

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(900)]

EPOCHS = N_RECORDS // CHUNK
# Seconds the held Kafka task sleeps (the application is killed long before).
HOLD_S = 240.0
# Kafka transaction timeout (ms) of the killed run: the held partition's open transaction
# pins its pending marker until the broker aborts it; short, so the checks at the restart
# do not wait a minute for it.
HELD_TXN_TIMEOUT_MS = 20_000


def test_application_killed_mid_epoch_keeps_the_table_behind_the_topic(
    kafka_bootstrap: str,
    tmp_path: Path,
    new_topic: Callable[..., str],
    postgres_dsn: str,
    schema: str,
    producer_strategy: str,
) -> None:
    sc = Scenario.create(kafka_bootstrap, tmp_path, new_topic, producer_strategy=producer_strategy)
    sc.sink_id = f"{schema}-mix"  # the schema fixture rolls back this sink's prepared leftovers
    sc.stage()
    table = TableSide(postgres_dsn, schema).create()
    kafka_id, pg_id = member_ids(sc.sink_id)
    epoch_of = {rid: i // CHUNK for i, rid in enumerate(record_ids(sc.inputs))}

    def topic_epochs() -> Counter[int]:
        return epochs_of(record_ids(read_committed_topic(sc.bootstrap, sc.output_topic)), epoch_of)

    # Two write partitions per sink, aligned: Kafka's are the plan's partitions 0 and 1,
    # PostgreSQL's 2 and 3; all four tasks run at once. In epoch 1 every task votes yes
    # (PostgreSQL: PREPAREd), Kafka partition 1 is held before its commit, Kafka partition 0
    # commits once the hold began and then SIGKILLs the whole application.
    options = {
        "sink": "kafka+postgres",
        "parallelism": 2,
        "master": "local[4,4]",
        **table.options("two-phase"),
    }
    plan = sc.fault_plan(
        [
            {
                "id": "hold",
                "step": "before_commit",
                "epoch": 1,
                "partition": 1,
                "action": "sleep",
                "seconds": HOLD_S,
            },
            {
                "id": "wait",
                "step": "before_commit",
                "epoch": 1,
                "partition": 0,
                "action": "await",
                "waits_for": "hold",
                "seconds": HOLD_S,
            },
            {
                "id": "kill_app",
                "step": "after_commit",
                "epoch": 1,
                "partition": 0,
                "action": "kill_app",
            },
        ]
    )
    first = sc.run(
        sc.config(
            fault_plan=plan, stage_retries=0, transaction_timeout_ms=HELD_TXN_TIMEOUT_MS, **options
        ),
        "first",
        expect=-9,
    )
    assert fired(plan, "kill_app") == 1 and fired(plan, "hold") == 1, "the kill never happened"
    assert [e.epoch for e in first.epochs] == [0]
    # At the restart: the topic holds part of epoch 1 (Kafka partition 0 committed it, 1 did
    # not), the table is prepared for it but shows none of it.
    markers = read_markers(sc.bootstrap, kafka_id, 2)
    assert [m.epoch if m else None for m in (markers[0], markers[1])] == [1, 0], markers
    assert table.prepared(pg_id) == [(1, 0), (1, 1)]
    in_topic, in_table = topic_epochs(), epochs_of(table.ids(), epoch_of)
    assert in_table == Counter({0: CHUNK})
    for epoch, rows in in_table.items():
        assert rows == CHUNK and in_topic[epoch] == CHUNK, (
            f"the table shows epoch {epoch}, the topic holds {in_topic[epoch]} of its rows"
        )
    assert 0 < in_topic[1] < CHUNK, in_topic  # partly committed on the topic side
    # A new application from the same checkpoint: recovery rolls the table's epoch 1 back
    # (no decision was logged); the replay skips Kafka partition 0 by its marker, writes
    # partition 1 and the table again, and commits the table after the topic.
    second = sc.run(sc.config(**options), "second")
    assert [e.epoch for e in second.epochs] == list(range(1, EPOCHS))
    shared = member_history(
        load_history(sc.bootstrap, sc.sink_id, None, DEFAULT_EPOCH_LOG_TOPIC), members=2
    )
    assert_exact(sc.check(sink_id=kafka_id, epoch_log=shared))
    report = table.check(pg_id, sc.inputs, epoch_log=shared)
    assert report.ok and report.epoch_log_checked and report.prepared == (), report.examples
    both = Counter(dict.fromkeys(range(EPOCHS), CHUNK))
    assert topic_epochs() == both and epochs_of(table.ids(), epoch_of) == both
