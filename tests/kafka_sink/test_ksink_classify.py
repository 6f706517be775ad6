import pytest
from confluent_kafka import KafkaError, KafkaException

from connectors.kafka import ErrorAction, KafkaWriteError, ProducerFencedError, classify
from connectors.kafka import _classify as classify_mod
from connectors.kafka._classify import call_with_retry


def err(code, *, fatal=False, retriable=False, abort=False):
    return KafkaError(code, "test", fatal=fatal, retriable=retriable, txn_requires_abort=abort)


@pytest.mark.parametrize(
    ("error", "action"),
    [
        (err(KafkaError._FENCED), ErrorAction.FATAL),
        (err(KafkaError.PRODUCER_FENCED), ErrorAction.FATAL),
        (err(KafkaError.INVALID_PRODUCER_EPOCH), ErrorAction.FATAL),
        (err(KafkaError.UNKNOWN, fatal=True), ErrorAction.FATAL),
        # fatal wins over abortable and retriable
        (err(KafkaError.UNKNOWN, fatal=True, abort=True, retriable=True), ErrorAction.FATAL),
        (err(KafkaError.UNKNOWN, abort=True), ErrorAction.ABORT),
        # abortable wins over retriable
        (err(KafkaError.UNKNOWN, abort=True, retriable=True), ErrorAction.ABORT),
        (err(KafkaError.UNKNOWN, retriable=True), ErrorAction.RETRY),
        (err(KafkaError._TIMED_OUT), ErrorAction.RETRY),
        (err(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), ErrorAction.RETRY),
        (err(KafkaError.CONCURRENT_TRANSACTIONS), ErrorAction.RETRY),
        (err(KafkaError.MSG_SIZE_TOO_LARGE), ErrorAction.ABORT),
        (err(KafkaError.TOPIC_AUTHORIZATION_FAILED), ErrorAction.ABORT),
    ],
)
def test_classify_kafka_errors(error, action):
    assert classify(error) is action
    assert classify(KafkaException(error)) is action


def test_classify_non_kafka_exceptions_abort():
    assert classify(ValueError("x")) is ErrorAction.ABORT
    assert classify(KafkaException("no error object")) is ErrorAction.ABORT


def test_classify_typed_errors_keep_their_action():
    assert classify(ProducerFencedError("f", action="fatal")) is ErrorAction.FATAL
    assert classify(KafkaWriteError("w", action="retry")) is ErrorAction.RETRY


@pytest.fixture
def no_wait(monkeypatch):
    monkeypatch.setattr(classify_mod, "RETRY_WAIT_MIN_S", 0.0)
    monkeypatch.setattr(classify_mod, "RETRY_WAIT_MAX_S", 0.0)
    monkeypatch.setattr(classify_mod, "BROKER_RESTART_WAIT_S", 0.0)


def test_call_with_retry_retries_transient_then_succeeds(no_wait):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise KafkaException(err(KafkaError._TIMED_OUT))
        return "ok"

    assert call_with_retry("op", flaky) == "ok"
    assert len(calls) == 3


def test_call_with_retry_is_bounded_and_escalates_to_abort(no_wait):
    calls = []

    def always():
        calls.append(1)
        raise KafkaException(err(KafkaError.UNKNOWN, retriable=True))

    with pytest.raises(KafkaWriteError) as info:
        call_with_retry("commit", always)
    assert len(calls) == classify_mod.RETRY_ATTEMPTS
    assert info.value.action == "abort"
    assert "commit" in str(info.value)


def test_call_with_retry_does_not_retry_abortable_or_fatal(no_wait):
    for error, typ, action in [
        (err(KafkaError.UNKNOWN, abort=True), KafkaWriteError, "abort"),
        (err(KafkaError._FENCED), ProducerFencedError, "fatal"),
    ]:
        calls = []

        def fail(error=error, calls=calls):
            calls.append(1)
            raise KafkaException(error)

        with pytest.raises(typ) as info:
            call_with_retry("op", fail)
        assert calls == [1]
        assert info.value.action == action
        assert info.value.code == error.code()


def test_call_with_retry_keeps_retrying_for_the_restart_window(monkeypatch):
    monkeypatch.setattr(classify_mod, "RETRY_WAIT_MIN_S", 0.0)
    monkeypatch.setattr(classify_mod, "RETRY_WAIT_MAX_S", 0.0)
    monkeypatch.setattr(classify_mod, "BROKER_RESTART_WAIT_S", 0.3)
    calls = []

    def always():
        calls.append(1)
        raise KafkaException(err(KafkaError._TRANSPORT))

    with pytest.raises(KafkaWriteError, match="0s of retries"):
        call_with_retry("read marker", always)
    # Refused connections fail fast: far more than RETRY_ATTEMPTS tries within the window.
    assert len(calls) > classify_mod.RETRY_ATTEMPTS


@pytest.mark.parametrize(
    ("error", "restart"),
    [
        (err(KafkaError._UNKNOWN_TOPIC, abort=True), True),
        (err(KafkaError.UNKNOWN_TOPIC_OR_PART), True),
        (err(KafkaError._TRANSPORT), True),
        (err(KafkaError.NOT_LEADER_FOR_PARTITION, abort=True), True),
        (err(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), True),
        (err(KafkaError._MSG_TIMED_OUT, abort=True), True),
        (err(KafkaError.MSG_SIZE_TOO_LARGE, abort=True), False),
        (err(KafkaError.TOPIC_AUTHORIZATION_FAILED), False),
        (err(KafkaError._FENCED), False),
        (err(KafkaError._UNKNOWN_TOPIC, fatal=True), False),
    ],
)
def test_broker_restart_errors_are_told_by_code(error, restart):
    assert classify_mod.broker_restart(error) is restart
    assert classify_mod.broker_restart(KafkaException(error)) is restart
    typed = KafkaWriteError("commit failed", action=classify(error), code=error.code())
    assert classify_mod.broker_restart(typed) is restart


def test_retry_over_restart_retries_restart_errors_only(no_wait, monkeypatch):
    monkeypatch.setattr(classify_mod, "BROKER_RESTART_WAIT_S", 5.0)
    calls = []

    def reload_then_ok():
        calls.append(1)
        if len(calls) < 4:
            raise KafkaException(err(KafkaError._UNKNOWN_TOPIC, abort=True))
        return "ok"

    assert classify_mod.retry_over_restart("append", reload_then_ok) == "ok"
    assert len(calls) == 4

    def too_large():
        calls.append(1)
        raise KafkaException(err(KafkaError.MSG_SIZE_TOO_LARGE, abort=True))

    calls.clear()
    with pytest.raises(KafkaException):
        classify_mod.retry_over_restart("append", too_large)
    assert calls == [1]
