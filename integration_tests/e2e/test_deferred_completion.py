"""The deferred completion across a crash (docs/architecture.md, "Deferred completion").

The completion of an exactly-once Kafka epoch N is written with the plan of N+1. The whole
application is SIGKILLed after ``foreachBatch`` returned for epoch 1 (Spark committed the
batch) and before the plan of epoch 2 is durable: the log shows epoch 1 planned without a
completion while Spark asks for epoch 2. The restart settles epoch 1 by its markers and
logs its completion with the plan of epoch 2, never redoing it; the checker then finds
every record exactly once. The two cases' first applications are killed one by one; their
restarts run side by side in one application. Real Spark, real confluent-kafka clients, the suite's broker;
the Kafka-topic epoch log (aligned) and the file log (unaligned).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from connectors.demo.app import EpochLine
from connectors.kafka import DEFAULT_EPOCH_LOG_TOPIC
from connectors.verify import AnomalyKind, load_history
from integration_tests.e2e._scenario import APP_RUN_TIMEOUT_S, Scenario, assert_exact, fired
from integration_tests.e2e._together import Case, run_cases
from txn import EpochHistory, EpochState

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(900)]


CASES = [("aligned", "kafka"), ("unaligned", "file")]


def test_application_killed_between_a_returned_call_and_the_next_plan(
    kafka_bootstrap: str, tmp_path: Path, new_topic: Callable[..., str], producer_strategy: str
) -> None:
    # Each case's first application is killed on its own; then both restarts run side by
    # side in one application (``_together``), each checked on its own.
    restarts = {
        f"{mode}-{log_kind}": killed_before_the_next_plan(
            Scenario.create(
                kafka_bootstrap,
                tmp_path / log_kind,
                new_topic,
                producer_strategy=producer_strategy,
            ),
            mode,
            log_kind,
        )
        for mode, log_kind in CASES
    }
    run_cases(restarts, tmp_path / "apps", APP_RUN_TIMEOUT_S)


def killed_before_the_next_plan(scenario: Scenario, mode: str, log_kind: str) -> Case:
    """Run the first application until its kill, check what it left; the restart as a case."""
    scenario.stage()
    epoch_log = str(scenario.tmp / "epochs.log") if log_kind == "file" else None

    def history() -> EpochHistory:
        loaded = load_history(
            scenario.bootstrap, scenario.sink_id, epoch_log, DEFAULT_EPOCH_LOG_TOPIC
        )
        assert isinstance(loaded, EpochHistory)
        return loaded

    # 1. the driver SIGKILLs itself (and the app with it) at the start of the call for
    #    epoch 2, before its plan (and epoch 1's completion with it) is durable.
    plan = scenario.fault_plan(
        [{"id": "d", "step": "driver_before_plan", "epoch": 2, "action": "kill", "times": 1}]
    )
    cfg = scenario.config(mode=mode, epoch_log=epoch_log)
    first = scenario.run(replace(cfg, fault_plan=plan), "first", expect=-9)
    assert fired(plan, "d") == 1, "the kill never fired: the test proved nothing"
    assert [e.epoch for e in first.epochs] == [0, 1]  # both calls returned
    stuck = history()
    assert stuck.state(1) is EpochState.PLANNED, stuck
    assert stuck.is_committed(0), stuck
    planned = stuck.plan(1)
    assert planned is not None
    width = planned.parallelism
    markers = scenario.markers(width)
    assert {p: m.epoch if m else None for p, m in markers.items()} == dict.fromkeys(range(width), 1)
    # The checker and the operator read epoch 1 as committed: its markers show it.
    report = scenario.check(epoch_log=epoch_log)
    assert report.count(AnomalyKind.IN_DOUBT_EPOCH) == 0, report
    assert report.last_committed_epoch == 1
    assert any("completion deferred" in n for n in report.notes), report.notes
    args = ["status", scenario.sink_id, "--topic", scenario.output_topic]
    code, status = scenario.eos(*args, *(["--epoch-log", epoch_log] if epoch_log else []))
    assert code == 0 and status["last_committed_epoch"] == 1 and status["in_doubt"] == [], status

    # 2. a new application from the same checkpoint: Spark asks for epoch 2 (its commit log
    #    has batch 1), never for epoch 1 again; epoch 1 is completed by its markers.
    def check(epochs: Sequence[EpochLine]) -> None:
        assert [e.epoch for e in epochs][:1] == [2], epochs
        done = history()
        assert done.is_committed(1) and not done.in_doubt(), done
        assert_exact(scenario.check(epoch_log=epoch_log))
        after = scenario.markers(width)
        assert all(m is not None and m.epoch > 1 for m in after.values()), after

    return Case(cfg, check)
