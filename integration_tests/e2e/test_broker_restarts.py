"""A running streaming query rides through broker restarts: no failure, exactly-once output.

Issue 17, hole 4: while a restarted broker reloaded its topics, the Kafka epoch log's
append failed with ``_UNKNOWN_TOPIC`` and the query died. Here one Spark application
writes with ``KafkaSink`` (the epoch log in Kafka) while its broker is restarted three
times at random points of the epochs: a clean stop, a SIGKILL, and a SIGKILL with the
broker down for a few seconds. The broker answers metadata without topics for
``LOAD_DELAY_MS`` after every start (a Kafka broker that reloads its topics). The app
must finish with exit code 0, and the checker must find every record exactly once.

The test owns its broker (the restarts cannot hit the session's shared one).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from connectors.demo.app import AppProcess
from integration_tests.e2e._scenario import (
    APP_RUN_TIMEOUT_S,
    Scenario,
    assert_exact,
    topic_maker,
)

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


def _restart(broker: object, how: str) -> None:
    if how == "clean":
        broker.terminate()  # type: ignore[attr-defined]
    else:
        broker.kill()  # type: ignore[attr-defined]
    if how == "killed-down":
        time.sleep(DOWN_S)
    broker.start()  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_broker_restarts_under_a_running_query(tmp_path: Path, mode: str) -> None:

    from minikafka import BrokerProcess

    with BrokerProcess(
        data_dir=str(tmp_path / "broker"), extra_args=["--topic-load-delay-ms", str(LOAD_DELAY_MS)]
    ) as broker:
        time.sleep(LOAD_DELAY_MS / 1000 + 0.5)
        make_topic = topic_maker(broker.bootstrap_servers)

        sc = Scenario.create(
            broker.bootstrap_servers,
            tmp_path,
            make_topic,
            n=RECORDS,
            client_config={"topic.metadata.propagation.max.ms": str(PROPAGATION_MS)},
        )
        epochs = sc.stage()
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
        app = AppProcess(
            sc.config(mode=mode, fault_plan=hold), tmp_path / "apps", name="run"
        ).start()
        assert app.wait_for(lambda a: len(a.epochs) >= 2, APP_RUN_TIMEOUT_S), app.stderr_tail()
        for how in ("clean", "killed", "killed-down"):
            seen = len(app.epochs)
            assert app.wait_for(lambda a, n=seen: len(a.epochs) >= n + 2, APP_RUN_TIMEOUT_S), (
                app.stderr_tail()
            )
            _restart(broker, how)
        before_last = len(app.epochs)
        code = app.wait(APP_RUN_TIMEOUT_S)
        assert code == 0, f"{app.failure_summary()}\n{app.stderr_tail()}"
        assert {e.epoch for e in app.epochs} == set(range(epochs))
        assert before_last < epochs, "the query ended before the last restart: proves nothing"
        assert_exact(sc.check())  # the epoch log and the markers agree, too
