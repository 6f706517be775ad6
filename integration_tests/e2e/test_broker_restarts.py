"""Running streaming queries ride through four broker restarts in a row: none dies.

Issues 17 (hole 4) and 38: a restarted broker that reloads its topics made the Kafka epoch
log's append fail with ``_UNKNOWN_TOPIC``, and after a restart a long-lived client could
keep a stale "Unknown topic" verdict for minutes while the broker had the topic back (the
query of issue 38 died 62 s after its fourth restart). Here one Spark application runs
three queries side by side (``_together``), each writing with its own ``KafkaSink`` (the
epoch log in Kafka): the ``kafka-rc`` source into the sink aligned, and chunk files into
the sink aligned and unaligned. Their broker restarts four times, at points two
epochs apart:

1. ``clean``: SIGTERM, started at once;
2. ``killed``: SIGKILL, started at once;
3. ``killed-down``: SIGKILL, down for ``LONG_DOWN_S``, longer than the clients' longest
   reconnect back-off (``RECONNECT_BACKOFF_MAX_MS``), so every client has given up a
   connection attempt and waits to try again;
4. ``while-loading``: once every client has known its topics for longer than its
   propagation time (``PROPAGATION_MS``), SIGKILL, started loading (Metadata names every
   topic with ``LEADER_NOT_AVAILABLE``), SIGKILLed again while it still loads, then started
   in minikafka's ``flap`` mode for ``LOAD_DELAY_MS``: the first Metadata answer on each
   connection lists the topics without leaders, later ones list none, and every aged client
   that asks reaches an "Unknown topic" verdict; the answers listing the topic once the
   broker has loaded come within the propagation time after that verdict, so librdkafka
   refuses to lift it and the verdict is stale (docs/kafka-semantics.md "A stale
   Unknown-topic verdict"). This is the state of issue 38: the code before its fix retried
   the epoch-log append with the stale producer for 60 s and the query died.

After the first three starts the broker answers Metadata without topics for
``LOAD_DELAY_MS`` (a Kafka broker reloading its topics). Asserted: every query printed every
epoch and ended (it never died: the application would exit 3 with the query's traceback),
the checker finds every record of each query exactly once, and no epoch after the start
took longer than the longest outage plus ``EPOCH_OVER_OUTAGE_S``.

The test owns its broker (the restarts cannot hit the session's shared one).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from connectors.demo.app import EpochLine
from integration_tests.e2e._scenario import (
    APP_RUN_TIMEOUT_S,
    CHUNK,
    Scenario,
    assert_exact,
    topic_maker,
)
from integration_tests.e2e._together import Together

if TYPE_CHECKING:
    from minikafka import BrokerProcess

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
# Records of the run: twenty epochs of the scenario's chunk size, so the four restarts, two
# epochs apart, land mid-run.
RECORDS = 2000
# Milliseconds librdkafka waits for a topic it has not known long to appear in the metadata
# (topic.metadata.propagation.max.ms, 30 s by default), set lower on every client of the run
# so that the waits below can be short. A client marks a topic it knows non-existent at
# once only if its last change of the topic's state is this long before the Metadata
# answer (librdkafka's rd_kafka_topic_set_notexists), and it refuses to take the verdict
# back for this long after it (rd_kafka_topic_set_exists).
PROPAGATION_MS = 5000
# Milliseconds of the largest reconnect back-off of every client of the run
# (reconnect.backoff.max.ms, 10 s by default): the clients reach the flap start of the
# fourth restart within its LOAD_DELAY_MS. librdkafka doubles a broker's back-off at each
# attempt and resets it only once its last attempt lies this long in the past
# (rd_kafka_broker_update_reconnect_backoff), so with the default a back-off near 10 s,
# left over from the third restart, let clients miss the flap start altogether.
RECONNECT_BACKOFF_MAX_MS = 1000
CLIENT_CONFIG = {
    "topic.metadata.propagation.max.ms": str(PROPAGATION_MS),
    "reconnect.backoff.max.ms": str(RECONNECT_BACKOFF_MAX_MS),
}
# Seconds the driver holds epoch 1 (a fault plan's sleep) before the restarts: the clients,
# which know their topics since epoch 0, know them for longer than PROPAGATION_MS at the
# first restart (two more epochs later), as in a long-running query: librdkafka then fails
# a record at once when the reloading broker reports the topic unknown, instead of
# waiting for it to appear.
RUN_BEFORE_RESTART_S = PROPAGATION_MS / 1000 + 1.0
# Seconds the broker stays down in the third restart: more than the clients' largest
# reconnect back-off, so every client's next attempt is a back-off away when the broker
# returns (the 20 s outage with the default 10 s back-off behaves the same for the
# clients, a longer wait only).
LONG_DOWN_S = 3 * RECONNECT_BACKOFF_MAX_MS / 1000
# Seconds the broker loads before it is restarted again (restart 4): clients reconnect and
# ask it for metadata meanwhile.
STILL_LOADING_S = 2.0
# Milliseconds that first start of restart 4 would load by itself: far longer than
# STILL_LOADING_S (it is cut short by the next restart, as a broker restarted while it
# still loads).
STILL_LOADING_DELAY_MS = 600_000
# Seconds after a restart's load by which each client has settled its topics' states (the
# Metadata answers it gets while the broker loads change them; librdkafka rescans its
# topics every second).
SETTLE_S = 2.0
# The longest outage of the four, in seconds: down, then loading; or loading, restarted,
# then loading in flap mode.
OUTAGE_S = max(LONG_DOWN_S, STILL_LOADING_S) + LOAD_DELAY_MS / 1000
# Seconds an epoch may take beyond the longest outage: an epoch caught by a restart waits
# the outage out, then a new transaction (or a re-run of its write stage) and at most one
# propagation time for a stale verdict to lift (the slowest epoch took 11.5 s in all on a
# 2-core machine at load 19); half the 60 s a client retrying its stale verdict waited
# before it gave up (BROKER_RESTART_WAIT_S: the epochs that ended so before the fix of
# issue 38 took 62 s).
EPOCH_OVER_OUTAGE_S = 30.0
# The kafka-rc query first: its Python streaming source process connects back to the JVM
# when the query starts, within Spark's fixed 10 s, best before the others load the machine.
QUERIES = ("kafka-rc", "aligned", "unaligned")
RESTARTS = ("clean", "killed", "killed-down", "while-loading")


def _load_args(mode: str = "hidden", delay_ms: int = LOAD_DELAY_MS) -> tuple[str, ...]:
    return ("--topic-load-delay-ms", str(delay_ms), "--topic-load-mode", mode)


def _restart(broker: BrokerProcess, how: str) -> None:
    """Restart the broker ``how`` (module docstring)."""
    if how == "clean":
        broker.terminate()
    else:
        broker.kill()
    if how == "killed-down":
        time.sleep(LONG_DOWN_S)
    if how == "while-loading":
        # The flap start loads for LOAD_DELAY_MS, less than PROPAGATION_MS: the answers
        # listing the topics once it has loaded reach a client within the propagation time
        # after its verdict, which librdkafka then keeps. The start before it answers
        # LEADER_NOT_AVAILABLE, which leaves the clients' topic states (and so their age)
        # as they are; "hidden"'s UNKNOWN_TOPIC_OR_PART would send every topic back to
        # UNKNOWN with a new propagation allowance, and no client reaches a verdict then.
        broker.extra_args = _load_args("errors", STILL_LOADING_DELAY_MS)
        broker.start()
        time.sleep(STILL_LOADING_S)
        broker.kill()
        broker.extra_args = _load_args("flap")
    broker.start()
    broker.extra_args = _load_args()


def _config(sc: Scenario, query: str, hold: str) -> object:
    if query == "kafka-rc":
        return sc.config(
            mode="aligned",
            fault_plan=hold,
            source="kafka",
            input_topic=sc.input_topic,
            max_offsets_per_trigger=CHUNK,
        )
    return sc.config(mode=query, fault_plan=hold)


def test_four_broker_restarts_under_running_queries(tmp_path: Path, producer_strategy: str) -> None:
    from minikafka import BrokerProcess

    with BrokerProcess(data_dir=str(tmp_path / "broker"), extra_args=_load_args()) as broker:
        time.sleep(LOAD_DELAY_MS / 1000 + 0.5)
        make_topic = topic_maker(broker.bootstrap_servers)
        # One query per kind, side by side in one application (``_together``): the same
        # restarts hit all, each with its own topics, sink id and check.
        scenarios: list[Scenario] = []
        configs = []
        for query in QUERIES:
            sc = Scenario.create(
                broker.bootstrap_servers,
                tmp_path / query,
                make_topic,
                n=RECORDS,
                client_config=CLIENT_CONFIG,
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
            configs.append(_config(sc, query, hold))
        # Staggered: three Python data source and worker processes started at once on a
        # loaded machine left one unconnected after Spark's fixed 10 s (seen here).
        app = Together(configs, tmp_path / "apps", "run", stagger=True).start()  # type: ignore[arg-type]

        def each_has(counts: list[int]) -> bool:
            return all(len(e) >= n for e, n in zip(app.epochs, counts, strict=True))

        assert app.wait_for(lambda: each_has([2] * len(QUERIES)), APP_RUN_TIMEOUT_S), (
            app.stderr_tail()
        )
        loaded_at = 0.0
        for how in RESTARTS:
            seen = [len(e) + 2 for e in app.epochs]
            assert app.wait_for(lambda n=seen: each_has(n), APP_RUN_TIMEOUT_S), app.stderr_tail()
            if how == "while-loading":
                # From now on at the latest: the two epochs since restart 3 may have made
                # new clients (a producer replaced after a failed write or append).
                _wait_until_aged(max(loaded_at, time.monotonic()))
            _restart(broker, how)
            loaded_at = time.monotonic() + LOAD_DELAY_MS / 1000 + SETTLE_S
        before_last = [len(e) for e in app.epochs]
        code = app.wait(APP_RUN_TIMEOUT_S)
        assert code == 0, f"a query died:\n{app.stderr_tail()}"
        assert all(app.done), f"queries not done: {dict(zip(QUERIES, app.done, strict=True))}"
        for query, sc, done, before in zip(
            QUERIES, scenarios, app.epochs, before_last, strict=True
        ):
            assert {e.epoch for e in done} == set(range(len(done))), query
            if query != "kafka-rc":  # a chunk file per epoch (kafka-rc: offsets, markers too)
                assert len(done) == RECORDS // CHUNK, query
            assert before < len(done), f"{query}: the query ended before the last restart"
            _assert_no_epoch_outlasted_the_outage(query, done)
            assert_exact(sc.check())  # the epoch log and the markers agree, too


def _wait_until_aged(settled_at: float) -> None:
    """Wait until the flap answers of restart 4 reach clients whose topic states last
    changed at ``settled_at`` at the latest, more than PROPAGATION_MS before (the first
    answer comes at least STILL_LOADING_S after the restart begins)."""
    delay = settled_at + PROPAGATION_MS / 1000 - STILL_LOADING_S - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _assert_no_epoch_outlasted_the_outage(query: str, epochs: list[EpochLine]) -> None:
    # Epoch 0 pays the application's start-up (Python workers, first shuffle) and epoch 1
    # the test's own hold; the restarts come later.
    slow = [
        (e.epoch, round(e.seconds, 1))
        for e in epochs
        if e.epoch > 1 and e.seconds > OUTAGE_S + EPOCH_OVER_OUTAGE_S
    ]
    assert not slow, (
        f"{query}: epochs (epoch, s) longer than {OUTAGE_S + EPOCH_OVER_OUTAGE_S}s: {slow}"
    )
