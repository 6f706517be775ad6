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
