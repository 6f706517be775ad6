"""A running streaming query rides through broker restarts: no failure, exactly-once output.

Issue 17, hole 4: while a restarted broker reloaded its topics, the Kafka epoch log's
append failed with ``_UNKNOWN_TOPIC`` and the query died. Here one Spark application
runs two queries side by side, one per commit mode, each writing with its own
``KafkaSink`` (the epoch log in Kafka) while their broker is restarted three
times at random points of the epochs: a clean stop, a SIGKILL, and a SIGKILL with the
broker down for a few seconds. The broker answers metadata without topics for
``LOAD_DELAY_MS`` after every start (a Kafka broker that reloads its topics). The app
must finish with exit code 0, and the checker must find every record of each query
exactly once.

The test owns its broker (the restarts cannot hit the session's shared one).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from integration_tests.e2e._scenario import (
    APP_RUN_TIMEOUT_S,
    CHUNK,
    Scenario,
    assert_exact,
    topic_maker,
)
from integration_tests.e2e._together import Together

pytestmark = [
    pytest.mark.spark,
    pytest.mark.e2e,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(
        bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")),
        reason="restarts a broker it owns; an external cluster (KAFKA_BOOTSTRAP_SERVERS) "
        "cannot be restarted by the test",
    ),
]

# Milliseconds after each start during which the broker answers metadata without topics.
LOAD_DELAY_MS = 3000
# Records of the run: twenty epochs of the scenario's chunk size, so restarts land mid-run
# (the last one after about ten epochs).
RECORDS = 2000
# Milliseconds librdkafka waits for a topic it has not known long to appear in the metadata
# (topic.metadata.propagation.max.ms, 30 s by default), set lower on every client of the run
# so that the hold below can be short.
PROPAGATION_MS = 5000
# Seconds the driver holds epoch 1 (a fault plan's sleep) before the restarts: the clients
# must have known their topics for longer than PROPAGATION_MS, as in a long-running query;
# librdkafka then fails a record at once when the reloading broker reports the topic
# unknown, instead of waiting for it to appear.
RUN_BEFORE_RESTART_S = PROPAGATION_MS / 1000 + 5.0
# Seconds the broker stays down after a SIGKILL in the last restart.
DOWN_S = 3.0
MODES = ("aligned", "unaligned")


def _restart(broker: object, how: str) -> None:
    if how == "clean":
        broker.terminate()  # type: ignore[attr-defined]
    else:
        broker.kill()  # type: ignore[attr-defined]
    if how == "killed-down":
        time.sleep(DOWN_S)
    broker.start()  # type: ignore[attr-defined]


def test_broker_restarts_under_running_queries(tmp_path: Path, producer_strategy: str) -> None:
    from minikafka import BrokerProcess

    with BrokerProcess(
        data_dir=str(tmp_path / "broker"), extra_args=["--topic-load-delay-ms", str(LOAD_DELAY_MS)]
    ) as broker:
        time.sleep(LOAD_DELAY_MS / 1000 + 0.5)
        make_topic = topic_maker(broker.bootstrap_servers)
        # One query per mode, side by side in one application (``_together``): the same
        # restarts hit both, each with its own topics, sink id and check.
        scenarios: list[Scenario] = []
        configs = []
        for mode in MODES:
            sc = Scenario.create(
                broker.bootstrap_servers,
                tmp_path / mode,
                make_topic,
                n=RECORDS,
                client_config={"topic.metadata.propagation.max.ms": str(PROPAGATION_MS)},
                producer_strategy=producer_strategy,
            )
            sc.stage()
            hold = sc.fault_plan(
                [
                    {
                        "id": "hold",
                        "step": "driver_after_plan",
                        "epoch": 1,
                        "action": "sleep",
                        "seconds": RUN_BEFORE_RESTART_S,
                    }
                ]
            )
            scenarios.append(sc)
            configs.append(sc.config(mode=mode, fault_plan=hold))
        epochs = RECORDS // CHUNK
        app = Together(configs, tmp_path / "apps", "run").start()

        def each_has(counts: list[int]) -> bool:
            return all(len(e) >= n for e, n in zip(app.epochs, counts, strict=True))

        assert app.wait_for(lambda: each_has([2, 2]), APP_RUN_TIMEOUT_S), app.stderr_tail()
        for how in ("clean", "killed", "killed-down"):
            seen = [len(e) + 2 for e in app.epochs]
            assert app.wait_for(lambda n=seen: each_has(n), APP_RUN_TIMEOUT_S), app.stderr_tail()
            _restart(broker, how)
        before_last = [len(e) for e in app.epochs]
        code = app.wait(APP_RUN_TIMEOUT_S)
        assert code == 0, app.stderr_tail()
        for mode, sc, done, before in zip(MODES, scenarios, app.epochs, before_last, strict=True):
            assert {e.epoch for e in done} == set(range(epochs)), mode
            assert before < epochs, f"{mode}: the query ended before the last restart"
            assert_exact(sc.check())  # the epoch log and the markers agree, too
