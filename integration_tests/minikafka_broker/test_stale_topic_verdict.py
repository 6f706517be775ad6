"""A restarted minikafka in "flap" mode leaves a long-lived librdkafka producer refusing a topic.

Issue 38: after a broker restart a running query's epoch-log producer kept failing with
"Local: Unknown topic" although the broker had the topic. ``--topic-load-mode flap`` makes
minikafka answer Metadata so that any long-lived librdkafka client ends in that state; this
test reproduces it and pins the recovery recipe (docs/kafka-semantics.md, "A stale
Unknown-topic verdict", has librdkafka's mechanics with source locations):

1. a new client (for a transactional producer: a new instance of the same transactional.id)
   works at once;
2. the old client's own ``list_topics(topic)`` does not lift the verdict before
   ``topic.metadata.propagation.max.ms`` has passed since it was reached, and nothing lifts
   it by itself after that either (until ``topic.metadata.refresh.interval.ms``); a
   ``list_topics(topic)`` after that time does.

The clients use a propagation time of a few seconds instead of librdkafka's 30 s default so
the test is short; the mechanism is the same.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.kafka._client import stale_topic_verdict
from connectors.kafka._sink._epoch_log import KafkaEpochLog
from minikafka import BrokerConfig, EmbeddedKafka
from txn import EpochCompletion, EpochPlan

from .conftest import CLIENT_TIMEOUT_S

# Milliseconds of the clients' topic.metadata.propagation.max.ms (librdkafka: 30000).
PROPAGATION_MS = 5000
# Milliseconds a restarted broker "loads" in flap mode (the first Metadata answer on each
# connection lists the topic without a leader, later ones leave it out): far longer than the
# clients need to reach their verdict; the test then restarts the broker in normal mode.
LOAD_DELAY_MS = 600_000
# Seconds to wait for a state a client reaches on its own (generous: shared machine).
REACH_TIMEOUT_S = 60.0
POLL_S = 0.05
PROBE_FLUSH_S = 10.0
# Seconds the epoch log's append may take once the broker is back (its retries: at most the
# kit's BROKER_RESTART_WAIT_S, 60 s, from the first failure).
APPEND_TIMEOUT_S = 120.0


def _client_conf(bootstrap: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "linger.ms": 0,
        "topic.metadata.propagation.max.ms": PROPAGATION_MS,
    }


def _refuses(producer: Producer, topic: str) -> bool:
    """Whether produce() refuses ``topic`` at once with librdkafka's _UNKNOWN_TOPIC."""
    try:
        producer.produce(topic, b"probe", partition=0)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError._UNKNOWN_TOPIC:
            return True
        raise
    return False


def _wait(check: object, what: str) -> float:
    """Poll ``check`` until true; return the monotonic time it first was."""
    deadline = time.monotonic() + REACH_TIMEOUT_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out after {REACH_TIMEOUT_S}s waiting for {what}"
        time.sleep(POLL_S)
    return time.monotonic()


@pytest.fixture
def flapping(tmp_path: Path) -> Iterator[EmbeddedKafka]:
    with EmbeddedKafka(data_dir=tmp_path / "data") as kafka:
        yield kafka


def test_flap_mode_leaves_a_stale_unknown_topic_verdict_and_the_recipe_clears_it(flapping):
    kafka = flapping
    topic = f"verdict-{uuid.uuid4().hex[:8]}"
    tid = f"epoch-log-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT_S)
    conf = _client_conf(kafka.bootstrap_servers)
    epoch_log = Producer({**conf, "transactional.id": tid})
    epoch_log.init_transactions(CLIENT_TIMEOUT_S)
    plain = Producer({**conf, "enable.idempotence": True})
    known_since = time.monotonic()
    for producer in (epoch_log, plain):
        if producer is epoch_log:
            producer.begin_transaction()
        producer.produce(topic, b"before", partition=0)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    epoch_log.commit_transaction(CLIENT_TIMEOUT_S)
    # A client marks a known topic non-existent only once it has known it for longer than
    # its propagation time (librdkafka's rd_kafka_topic_set_notexists).
    _wait(lambda: time.monotonic() - known_since > PROPAGATION_MS / 1000, "aged clients")

    _restart(kafka, BrokerConfig(topic_load_delay_ms=LOAD_DELAY_MS, topic_load_mode="flap"))
    epoch_log.begin_transaction()
    verdict = _wait(lambda: _refuses(plain, topic), "the verdict of the idempotent producer")
    _wait(lambda: _refuses(epoch_log, topic), "the verdict of the transactional producer")
    epoch_log.abort_transaction(CLIENT_TIMEOUT_S)
    _restart(kafka, BrokerConfig())  # loaded: every answer lists the topic again
    _wait(lambda: _leader_known(admin, topic), "the restarted broker listing the topic again")

    assert _refuses(plain, topic), "the old client still refuses: the verdict is stale"
    # The old client's own metadata request does not lift it within the propagation time
    # (it re-arms it: its cache holds the topic again, so librdkafka stops re-querying).
    assert topic in plain.list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics
    assert time.monotonic() - verdict < PROPAGATION_MS / 1000, "too slow to check this"
    assert _refuses(plain, topic)
    # Recipe 1: a new instance of the transactional id works at once.
    replacement = Producer({**conf, "transactional.id": tid})
    replacement.init_transactions(CLIENT_TIMEOUT_S)
    replacement.begin_transaction()
    replacement.produce(topic, b"after", partition=0)
    replacement.commit_transaction(CLIENT_TIMEOUT_S)
    # Nothing lifts it by itself once that time has passed ...
    _wait(lambda: time.monotonic() - verdict > PROPAGATION_MS / 1000 + 2, "the propagation time")
    assert _refuses(plain, topic)
    # ... and a metadata request naming the topic after it does (recipe 2).
    plain.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    assert not _refuses(plain, topic)
    assert plain.flush(PROBE_FLUSH_S) == 0


def _restart(kafka: EmbeddedKafka, config: BrokerConfig) -> None:
    """Restart the broker (same port, same data) with other settings."""
    kafka.stop()
    kafka.config = config
    kafka.start()


# librdkafka's answers while the admin client reconnects to a restarted broker: not yet.
_RECONNECTING = (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


def _leader_known(admin: AdminClient, topic: str) -> bool:
    try:
        md = admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics.get(topic)
    except KafkaException as exc:  # a CI run timed out here once, under load
        if exc.args[0].code() in _RECONNECTING:
            return False
        raise
    return md is not None and md.error is None and md.partitions[0].leader >= 0


class _RetryWarnings(logging.Handler):
    """The errors of the kit's "retrying (attempt N)" warnings, as they are logged."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.errors: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        self.errors.extend(a for a in args if isinstance(a, BaseException))


def test_the_epoch_log_rides_through_a_stale_verdict(flapping):
    """Issue 38: the epoch log's producer refused its topic after a restart; now it is replaced.

    The append runs while the broker flaps and goes on once the broker is back: the
    failed attempt that carried the stale verdict gets a new producer, which sees the topic
    at once. Before the fix the old producer kept refusing until the retry bound
    (``BROKER_RESTART_WAIT_S``) and the append failed with ``TxnCode.EPOCH_LOG``.
    """
    kafka = flapping
    topic = f"log-{uuid.uuid4().hex[:8]}"
    sink_id = f"stale-{uuid.uuid4().hex[:8]}"
    log = KafkaEpochLog(
        kafka.bootstrap_servers,
        sink_id,
        topic=topic,
        client_config={"topic.metadata.propagation.max.ms": str(PROPAGATION_MS)},
    )
    log.append(EpochPlan(sink_id=sink_id, epoch=0, parallelism=2, fingerprint="fp"))
    known_since = time.monotonic()
    _wait(lambda: time.monotonic() - known_since > PROPAGATION_MS / 1000, "an aged producer")
    warnings = _RetryWarnings()
    logging.getLogger("connectors").addHandler(warnings)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    errors: list[BaseException] = []

    def append() -> None:
        try:
            log.append_all(
                [
                    EpochCompletion(sink_id, 0, committed=True),
                    EpochPlan(sink_id=sink_id, epoch=1, parallelism=2, fingerprint="fp"),
                ]
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    try:
        _restart(kafka, BrokerConfig(topic_load_delay_ms=LOAD_DELAY_MS, topic_load_mode="flap"))
        writer = threading.Thread(target=append, daemon=True)
        writer.start()
        _wait(
            lambda: any(stale_topic_verdict(e) for e in warnings.errors),
            "an append attempt refused with an Unknown-topic verdict",
        )
        _restart(kafka, BrokerConfig())
        _wait(lambda: _leader_known(admin, topic), "the restarted broker listing the topic again")
        writer.join(APPEND_TIMEOUT_S)
    finally:
        logging.getLogger("connectors").removeHandler(warnings)
    assert not writer.is_alive(), "the append did not end"
    assert errors == []
    history = KafkaEpochLog(kafka.bootstrap_servers, sink_id, topic=topic).load()
    assert history.entry(0) is not None and history.entry(1) is not None
    log.close()


def _aged(since: float) -> None:
    """Wait until clients known to their topics since ``since`` can reach a verdict at once."""
    _wait(lambda: time.monotonic() - since > PROPAGATION_MS / 1000, "aged clients")


def _flap_an_aged_client(
    kafka: EmbeddedKafka, admin: AdminClient, probe: Producer, topic: str
) -> None:
    """Once clients are aged, restart into flap mode until ``probe`` refuses ``topic``, then
    restart loaded and wait until the broker lists the topic with a leader again."""
    _aged(time.monotonic())
    _restart(kafka, BrokerConfig(topic_load_delay_ms=LOAD_DELAY_MS, topic_load_mode="flap"))
    _wait(lambda: _refuses(probe, topic), "an aged client's verdict")
    _restart(kafka, BrokerConfig())
    _wait(lambda: _leader_known(admin, topic), "the restarted broker listing the topic again")


def test_a_pooled_producer_inside_its_transaction_rides_through_a_stale_verdict(flapping):
    """Issue 38, the sink's producers (pooled, prepared, per task: one write path).

    A transactional producer that wrote before the restart begins its next transaction
    while it refuses the sink's topic; the writer asks the brokers for the topic with the
    producer itself until the verdict lifts, and the transaction commits with the same
    producer. Before, it retried ``produce`` alone until ``BROKER_RESTART_WAIT_S`` and
    aborted the epoch with "was it deleted?".
    """
    import pyarrow as pa

    from connectors.kafka._sink._writer import DeliveryErrors, RecordLayout, RecordWriter

    kafka = flapping
    topic = f"out-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT_S)
    conf = _client_conf(kafka.bootstrap_servers)
    producer = Producer({**conf, "transactional.id": f"pooled-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    errors = DeliveryErrors()
    rows = pa.RecordBatch.from_pydict({"key": [b"k1", b"k2"], "value": [b"v1", b"v2"]})

    def epoch() -> None:
        producer.begin_transaction()
        writer = RecordWriter(producer, errors, RecordLayout(key=True), topic)
        writer.write([rows])
        writer.flush(CLIENT_TIMEOUT_S)
        producer.commit_transaction(CLIENT_TIMEOUT_S)

    probe = Producer(conf)  # the same age and settings: shows when the verdict is reached
    probe.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    epoch()
    _flap_an_aged_client(kafka, admin, probe, topic)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            epoch()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failures.append(exc)

    writer_thread = threading.Thread(target=run, daemon=True)
    writer_thread.start()
    writer_thread.join(APPEND_TIMEOUT_S)
    assert not writer_thread.is_alive(), "the epoch did not end"
    assert failures == []
    assert errors.first is None
    assert _committed_values(kafka.bootstrap_servers, topic) == [b"v1", b"v2"] * 2


def _committed_values(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + REACH_TIMEOUT_S
    while time.monotonic() < deadline:
        msg = consumer.poll(POLL_S)
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() == KafkaError._PARTITION_EOF:
                break
            continue
        values.append(msg.value())
    consumer.close()
    return values


def test_the_sources_admin_client_and_cached_consumer_ride_through_a_stale_verdict(flapping):
    """Issue 38, the kafka-rc source: its driver's AdminClient and a worker's idle consumer.

    Both lived through the restart (the driver's ``ClusterView`` keeps one AdminClient; a
    worker keeps the consumer of a completed range for the next one). After it, the
    latest offsets are looked up and the next range read on the cached consumer.
    """
    from connectors.kafka._source import _consumers
    from connectors.kafka._source._cluster import ClusterView
    from connectors.kafka._source._fetch import read_range
    from connectors.kafka._source._options import SourceOptions
    from connectors.kafka._source._ranges import OffsetRange

    kafka = flapping
    topic = f"in-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT_S)
    writer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 0})
    for i in range(4):
        writer.produce(topic, f"v{i}".encode(), partition=0)
    assert writer.flush(CLIENT_TIMEOUT_S) == 0
    opts = SourceOptions.from_options(
        {
            "kafka.bootstrap.servers": kafka.bootstrap_servers,
            "subscribe": topic,
            "kafka.topic.metadata.propagation.max.ms": str(PROPAGATION_MS),
            "kafkaConsumer.pollTimeoutMs": str(int(APPEND_TIMEOUT_S * 1000)),
        }
    )
    view = ClusterView(opts)
    tp = (topic, 0)
    assert view.settled_latest({tp: 0}) == {tp: 4}
    first = [
        r["value"]
        for b in read_range(opts, OffsetRange(topic=topic, partition=0, start=0, end=2))
        for r in b.to_pylist()
    ]
    assert first == [b"v0", b"v1"] and _consumers.stats().idle >= 1
    plain = Producer(_client_conf(kafka.bootstrap_servers))
    plain.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    _flap_an_aged_client(kafka, admin, plain, topic)
    results: dict[str, object] = {}

    def batch() -> None:
        try:
            results["latest"] = view.settled_latest({tp: 4})
            rng = OffsetRange(topic=topic, partition=0, start=2, end=4)
            results["rows"] = [r["value"] for b in read_range(opts, rng) for r in b.to_pylist()]
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            results["error"] = exc

    runner = threading.Thread(target=batch, daemon=True)
    runner.start()
    runner.join(2 * APPEND_TIMEOUT_S)
    assert not runner.is_alive(), "the lookup and the read did not end"
    assert results == {"latest": {tp: 4}, "rows": [b"v2", b"v3"]}


def test_the_marker_writer_and_reader_ride_through_a_stale_verdict(flapping, monkeypatch):
    """Issue 38, the markers: a pooled producer's marker write and a pooled marker consumer.

    The marker is a transactional offset commit (``send_offsets_to_transaction``) and is
    read with ``committed()``. An aged producer that holds a stale verdict on the marker
    topic can block in ``send_offsets_to_transaction`` past its timeout (librdkafka 2.16,
    seen in most runs here); the kit's ``send_offsets`` gives such a producer up (FATAL)
    and the epoch's retry writes with a new instance of the transactional id. Before, the
    write task hung. The marker consumer needs no change: ``committed()`` asks the group
    coordinator without librdkafka's topic state in between.
    """
    from confluent_kafka import TopicPartition

    from connectors.kafka import KafkaConnectorError
    from connectors.kafka._client import _classify, cluster_of
    from connectors.kafka._sink import _transactional
    from connectors.kafka._sink._markers import encode_marker, marker_consumer, read_marker
    from txn import ErrorAction, Marker

    # Short call timeouts (the kit's: 60 s + 10 s) so that a blocked call is given up soon.
    monkeypatch.setattr(_transactional, "TXN_CALL_TIMEOUT_S", 5.0)
    monkeypatch.setattr(_classify, "HUNG_CALL_MARGIN_S", 2.0)
    kafka = flapping
    marker_topic = f"markers-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(marker_topic, 1, 1)])[marker_topic].result(CLIENT_TIMEOUT_S)
    conf = _client_conf(kafka.bootstrap_servers)
    tid = f"marker-{uuid.uuid4().hex[:8]}"

    def new_producer() -> Producer:
        producer = Producer({**conf, "transactional.id": tid})
        producer.init_transactions(CLIENT_TIMEOUT_S)
        return producer

    cluster = cluster_of(
        kafka.bootstrap_servers, {"topic.metadata.propagation.max.ms": str(PROPAGATION_MS)}
    )
    consumer = marker_consumer(cluster, f"sink.marker.{uuid.uuid4().hex[:6]}")

    def put(producer: Producer, epoch: int) -> None:
        offset, meta = encode_marker(Marker(epoch, 1, "c"))
        tp = TopicPartition(marker_topic, 0, offset, metadata=meta)
        producer.begin_transaction()
        _transactional.send_offsets(producer, [tp], consumer.consumer_group_metadata(), "put")
        producer.commit_transaction(CLIENT_TIMEOUT_S)

    pooled = new_producer()
    put(pooled, 0)
    assert read_marker(consumer, marker_topic) == Marker(0, 1, "c")
    plain = Producer(conf)
    plain.list_topics(marker_topic, timeout=CLIENT_TIMEOUT_S)
    _flap_an_aged_client(kafka, admin, plain, marker_topic)
    results: dict[str, object] = {}

    def epoch() -> None:
        try:
            try:
                put(pooled, 1)
            except (
                KafkaConnectorError
            ) as exc:  # given up (FATAL): the epoch's retry, a new instance
                if exc.action is not ErrorAction.FATAL:
                    raise
                results["given up"] = exc.action.value
                put(new_producer(), 1)
            results["marker"] = read_marker(consumer, marker_topic)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            results["error"] = exc

    runner = threading.Thread(target=epoch, daemon=True)
    runner.start()
    runner.join(2 * APPEND_TIMEOUT_S)
    assert not runner.is_alive(), "the marker write and read did not end"
    assert results.get("error") is None, results
    assert results["marker"] == Marker(1, 1, "c")
    assert results.get("given up", "fatal") == "fatal"
    consumer.close()
