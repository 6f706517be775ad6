"""The epoch log's appends and the marker reads ride through a broker restart (unit tests).

Test doubles stand in for the librdkafka clients (the integration test
``integration_tests/e2e/test_broker_restarts.py::test_four_broker_restarts_under_running_queries``
restarts a real broker under a query); they fail the way librdkafka does while a broker
reloads its topics.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from connectors.kafka import KafkaCode, KafkaConnectorError
from connectors.kafka._client import _classify
from connectors.kafka._sink import _markers
from connectors.kafka._sink._epoch_log import KafkaEpochLog
from txn import EpochHistory, EpochPlan, TxnCode, TxnError
from txn._codec import encode_record


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_classify, "RETRY_WAIT_MIN_S", 0.0)
    monkeypatch.setattr(_classify, "RETRY_WAIT_MAX_S", 0.0)
    monkeypatch.setattr(_classify, "BROKER_RESTART_WAIT_S", 2.0)


INCONSISTENT = KafkaError._INCONSISTENT  # librdkafka's local code


class TxnProducer:
    """A transactional producer whose commits fail with ``failures`` first, in order.

    A failure with ``delivery=code`` is what librdkafka does when a record failed: the
    record's delivery report carries ``code``, the commit fails with ``_INCONSISTENT``.
    """

    def __init__(self, failures: list[KafkaError], delivery: list[int | None] | None = None):
        self.failures = list(failures)
        self.delivery = list(delivery or [])
        self.calls: list[str] = []
        self.committed: list[list[tuple[str, bytes | None]]] = []
        self._open: list[tuple[str, bytes | None]] = []
        self._reports: list[Any] = []

    def begin_transaction(self) -> None:
        self.calls.append("begin")
        self._open = []

    def produce(self, topic: str, value: bytes | None, key: str, on_delivery: Any) -> None:
        self._open.append((key, value))
        self._reports.append(on_delivery)

    def flush(self, timeout: float) -> int:
        code = self.delivery.pop(0) if self.delivery else None
        for report in self._reports:
            report(None if code is None else KafkaError(code, "delivery failed"), None)
        self._reports = []
        return 0

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        if self.failures:
            raise KafkaException(self.failures.pop(0))
        self.committed.append(self._open)

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")
        self._open = []


PLAN = EpochPlan(sink_id="s1", epoch=1, parallelism=2, fingerprint="fp")
KEY = "s1/r/00000000000000000001/000000/plan"


class OwnedLog(KafkaEpochLog):
    """The Kafka epoch log with taking over replaced: each take-over hands out a producer."""

    def __init__(self, producers: list[TxnProducer]) -> None:
        super().__init__("unused:9092", "s1", create_topic=False)
        self.producers = producers
        self.takeovers = 0

    def _acquire(self) -> Any:
        if self._producer is None:
            self._producer = self.producers[self.takeovers]  # type: ignore[assignment]
            self._history = EpochHistory.from_records([], sink_id="s1")
            self.takeovers += 1
        return self._producer


def write(producer: TxnProducer) -> None:
    OwnedLog([producer]).append(PLAN)


def reload_error(code: int) -> KafkaError:
    # What librdkafka raises from commit_transaction when a record of the transaction
    # failed: abortable, carrying the record's error code.
    return KafkaError(code, "test", txn_requires_abort=True)


def test_an_append_is_written_again_after_the_broker_reloaded_its_topics() -> None:
    producer = TxnProducer([reload_error(KafkaError.NOT_LEADER_FOR_PARTITION)] * 2)
    write(producer)
    assert producer.calls == ["begin", "commit", "abort"] * 2 + ["begin", "commit"]
    assert producer.committed == [[(KEY, encode_record(PLAN))]]


def test_an_unknown_topic_gets_a_new_producer_for_the_next_attempt() -> None:
    # Issue 38: the old producer may keep a stale "no such topic" verdict for minutes.
    stale = TxnProducer([reload_error(KafkaError._UNKNOWN_TOPIC)])
    fresh = TxnProducer([reload_error(KafkaError.NOT_LEADER_FOR_PARTITION)])
    log = OwnedLog([stale, fresh])
    log.append(PLAN)
    assert log.takeovers == 2
    assert stale.calls == ["begin", "commit", "abort"] and stale.committed == []
    assert fresh.calls == ["begin", "commit", "abort", "begin", "commit"]  # kept: not stale
    assert fresh.committed == [[(KEY, encode_record(PLAN))]]


def test_an_append_whose_record_failed_delivery_is_classified_by_the_delivery_error() -> None:
    # Seen against a restarted broker: "1 message(s) failed delivery", _INCONSISTENT.
    inconsistent = KafkaError(INCONSISTENT, "1 message(s) failed delivery", txn_requires_abort=True)
    producer = TxnProducer([inconsistent], delivery=[KafkaError._UNKNOWN_TOPIC])
    fresh = TxnProducer([])
    OwnedLog([producer, fresh]).append(PLAN)  # an Unknown-topic cause: a new producer
    assert producer.calls == ["begin", "commit", "abort"]
    assert fresh.calls == ["begin", "commit"]
    assert fresh.committed == [[(KEY, encode_record(PLAN))]]
    # Records purged by the failed transaction are a consequence: the commit's error counts.
    sequence = KafkaError(
        KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "skipped sequence numbers", txn_requires_abort=True
    )
    producer = TxnProducer([sequence], delivery=[KafkaError._PURGE_QUEUE])
    write(producer)
    assert producer.calls == ["begin", "commit", "abort", "begin", "commit"]
    too_large = TxnProducer([inconsistent], delivery=[KafkaError.MSG_SIZE_TOO_LARGE])
    with pytest.raises(
        TxnError, match="MSG_SIZE_TOO_LARGE|too large", check=lambda e: e.code is TxnCode.EPOCH_LOG
    ):
        write(too_large)
    assert too_large.calls == ["begin", "commit", "abort"]


def test_a_failed_abort_takes_the_log_over_again_before_the_next_attempt() -> None:
    # Seen after a SIGKILLed broker: the coordinator lost the open transaction, so the
    # abort fails (INVALID_TXN_STATE, fatal); a new producer takes the log over.
    class LostTxn(TxnProducer):
        def abort_transaction(self, timeout: float) -> None:
            self.calls.append("abort")
            raise KafkaException(KafkaError(KafkaError.INVALID_TXN_STATE, "lost", fatal=True))

    first = LostTxn([reload_error(KafkaError._UNKNOWN_TOPIC)])
    second = TxnProducer([])
    log = OwnedLog([first, second])
    log.append(PLAN)
    assert log.takeovers == 2
    assert first.committed == [] and second.committed == [[(KEY, encode_record(PLAN))]]


def test_an_append_that_cannot_succeed_fails_at_once() -> None:
    producer = TxnProducer([reload_error(KafkaError.MSG_SIZE_TOO_LARGE)])
    with pytest.raises(TxnError, match="not durable", check=lambda e: e.code is TxnCode.EPOCH_LOG):
        write(producer)
    assert producer.calls == ["begin", "commit", "abort"]


def test_an_outage_longer_than_the_bound_fails_the_append(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_classify, "BROKER_RESTART_WAIT_S", 0.2)
    producers = [TxnProducer([reload_error(KafkaError._UNKNOWN_TOPIC)]) for _ in range(1000)]
    log = OwnedLog(producers)
    with pytest.raises(
        TxnError, match="_UNKNOWN_TOPIC", check=lambda e: e.code is TxnCode.EPOCH_LOG
    ):
        log.append(PLAN)
    assert log.takeovers >= 2 and not any(p.committed for p in producers)


def test_a_fenced_append_is_not_retried() -> None:
    producer = TxnProducer([KafkaError(KafkaError._FENCED, "fenced", fatal=True)])
    with pytest.raises(KafkaConnectorError, check=lambda e: e.code is TxnCode.EPOCH_LOG_LOCKED):
        write(producer)
    assert producer.calls == ["begin", "commit"]


class MarkerConsumer:
    """``committed()`` answers with a per-partition error ``errors`` times, then the offset."""

    def __init__(self, errors: list[KafkaError]) -> None:
        self.errors = list(errors)
        self.calls = 0

    def poll(self, timeout: float) -> None:
        return None

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[Any]:
        self.calls += 1
        if self.errors:
            return [SimpleNamespace(offset=-1001, metadata=None, error=self.errors.pop(0))]
        meta = '{"epoch":7,"rows":2,"checksum":"c"}'
        return [SimpleNamespace(offset=8, metadata=meta, error=None)]


def test_a_marker_read_waits_for_the_marker_topic_to_be_loaded() -> None:
    consumer = MarkerConsumer(
        [
            KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART),
            KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS),
        ]
    )
    marker = _markers.read_marker(consumer, "markers")  # type: ignore[arg-type]
    assert marker is not None and (marker.epoch, marker.rows) == (7, 2)
    assert consumer.calls == 3


def test_a_marker_read_reports_other_partition_errors() -> None:
    consumer = MarkerConsumer([KafkaError(KafkaError.INVALID_COMMIT_OFFSET_SIZE)])
    with pytest.raises(
        KafkaConnectorError,
        match="INVALID_COMMIT_OFFSET_SIZE",
        check=lambda e: e.code is KafkaCode.MARKER,
    ):
        _markers.read_marker(consumer, "markers")  # type: ignore[arg-type]


def test_a_marker_read_refused_by_an_acl_names_it() -> None:
    consumer = MarkerConsumer([KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)])
    with pytest.raises(
        KafkaConnectorError,
        match="the marker and epoch-log topics",
        check=lambda e: e.code is KafkaCode.AUTHORIZATION,
    ):
        _markers.read_marker(consumer, "markers")  # type: ignore[arg-type]


# Seconds a stuck call blocks at most: far past the bound under test, short enough that a
# regression fails the test instead of hanging it.
STUCK_S = 10.0


class BlockedOffsets:
    """send_offsets_to_transaction blocks past its timeout (issue 38: a stale verdict); the
    warm-up transaction's other calls return at once."""

    def __init__(self, released: threading.Event) -> None:
        self.released = released
        self.calls = 0
        self.aborts = 0

    def send_offsets_to_transaction(self, offsets: object, group: object, timeout: float) -> None:
        self.calls += 1
        self.released.wait(STUCK_S)

    def list_topics(self, *args: Any, **kwargs: Any) -> None:
        return None

    def begin_transaction(self) -> None:
        return None

    def abort_transaction(self, *args: Any) -> None:
        self.aborts += 1


def _gives_the_producer_up(call: Callable[[BlockedOffsets], object]) -> None:
    """``call`` on a producer stuck in send_offsets raises FATAL, never calling it again."""
    from connectors.kafka import KafkaCode, KafkaConnectorError
    from txn import ErrorAction

    released = threading.Event()
    producer = BlockedOffsets(released)
    try:
        with pytest.raises(KafkaConnectorError) as info:
            call(producer)
    finally:
        released.set()
    assert info.value.action is ErrorAction.FATAL and info.value.code is KafkaCode.WRITE
    assert producer.calls == 1 and producer.aborts == 0  # abandoned: never called again


def test_a_send_offsets_call_blocked_past_its_timeout_gives_the_producer_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from connectors.kafka._sink import _transactional

    monkeypatch.setattr(_transactional, "TXN_CALL_TIMEOUT_S", 0.05)
    monkeypatch.setattr(_classify, "HUNG_CALL_MARGIN_S", 0.05)
    _gives_the_producer_up(
        lambda producer: _transactional.send_offsets(producer, [], object(), "marker")  # type: ignore[arg-type]
    )


def test_a_warm_up_stuck_in_send_offsets_drops_the_preparation_and_the_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from connectors.kafka._sink import _prepare

    monkeypatch.setattr(_prepare, "METADATA_TIMEOUT_S", 0.05)
    monkeypatch.setattr(_classify, "HUNG_CALL_MARGIN_S", 0.05)
    consumer = SimpleNamespace(consumer_group_metadata=lambda: object())
    _gives_the_producer_up(
        lambda producer: _prepare._warm(producer, consumer, "out")  # type: ignore[arg-type]
    )
