"""A broker restart between transactions must not wedge the sink's transactional producer.

Regression test for the hang of ``test_broker_restarted_during_commits``: with librdkafka
2.16 defaults, the restart takes every broker down, which starts a KIP-1102
re-bootstrap; it decommissions the learned broker while that broker stays cached as
the group coordinator, and the next ``send_offsets_to_transaction`` waits forever,
past its own timeout (librdkafka issues #5511 and #5456). The sink's producer settings
(``metadata.recovery.strategy=none``) avoid that; this test fails (bounded, never
hangs) if they stop doing so.

The test owns its broker (a restart cannot hit the session's shared broker).
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer, TopicPartition

from connectors.kafka import KafkaSink
from connectors.kafka._sink._markers import marker_consumer
from minikafka import BrokerProcess

from .conftest import CLIENT_TIMEOUT_S, make_topic

# Seconds send_offsets_to_transaction may take (librdkafka's own timeout of the call).
SEND_OFFSETS_TIMEOUT_S = 10.0
# Seconds the test waits for that call to return before calling it wedged: far beyond
# its own timeout, so only a call that ignores its timeout trips it on a busy machine.
WEDGED_AFTER_S = 90.0


def _transaction(
    producer: Producer, topic: str, marker_topic: str, group_md: object, n: int
) -> None:
    """One transaction: a record plus an offset in the marker group, then commit.

    Raises AssertionError if send_offsets_to_transaction neither returns nor raises
    within WEDGED_AFTER_S (the call runs in a daemon thread so the test never hangs).
    """
    producer.begin_transaction()
    producer.produce(topic, b"v%d" % n)
    outcome: list[BaseException | None] = []

    def send() -> None:
        try:
            producer.send_offsets_to_transaction(
                [TopicPartition(marker_topic, 0, n + 1)], group_md, SEND_OFFSETS_TIMEOUT_S
            )
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread below
            outcome.append(exc)

    worker = threading.Thread(target=send, name="send-offsets", daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(WEDGED_AFTER_S)
    assert outcome, (
        f"send_offsets_to_transaction (timeout {SEND_OFFSETS_TIMEOUT_S}s) still blocked after "
        f"{time.monotonic() - started:.0f}s: librdkafka is wedged on a stale group coordinator"
    )
    if outcome[0] is not None:
        raise outcome[0]
    producer.commit_transaction(CLIENT_TIMEOUT_S)


def test_sink_producer_survives_broker_restart_between_transactions(tmp_path: Path) -> None:
    with BrokerProcess(data_dir=tmp_path / "data") as broker:
        bs = broker.bootstrap_servers
        topic, marker_topic = make_topic(bs), make_topic(bs)
        sink_id = f"rs-{uuid.uuid4().hex[:8]}"
        cfg = KafkaSink(bs, topic, sink_id, marker_topic=marker_topic).config
        producer = Producer(
            {**cfg.producer_settings(cfg.transactional_id(0)), "bootstrap.servers": bs}
        )
        consumer = marker_consumer(cfg.cluster, cfg.marker_group(0))
        try:
            producer.init_transactions(CLIENT_TIMEOUT_S)
            group_md = consumer.consumer_group_metadata()
            # 1. the producer learns the group coordinator (broker 0)
            _transaction(producer, topic, marker_topic, group_md, 0)
            # 2. the only broker goes away and comes back on the same port
            broker.restart()
            # 3. the next transaction's offsets still reach the group coordinator
            _transaction(producer, topic, marker_topic, group_md, 1)
            (committed,) = consumer.committed(
                [TopicPartition(marker_topic, 0)], timeout=CLIENT_TIMEOUT_S
            )
            assert committed.offset == 2
        finally:
            consumer.close()
            producer.flush(CLIENT_TIMEOUT_S)
