import pickle
import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from connectors.kafka import KafkaCode, KafkaConnectorError, classify
from connectors.kafka._client import _classify as classify_mod
from connectors.kafka._client import (
    call_bounded,
    call_with_retry,
    raise_if_denied,
    stale_topic_verdict,
    to_write_error,
)
from txn import ErrorAction, can_retry_stage


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
        # too few in-sync replicas (brokers away): transient, retried within the bound...
        (err(KafkaError.NOT_ENOUGH_REPLICAS), ErrorAction.RETRY),
        (err(KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND), ErrorAction.RETRY),
        # ...and a transaction it failed is aborted (then begun again, see broker_restart)
        (err(KafkaError.NOT_ENOUGH_REPLICAS, abort=True), ErrorAction.ABORT),
        (err(KafkaError.NOT_ENOUGH_REPLICAS, fatal=True), ErrorAction.FATAL),
        # authentication and authorization: retrying cannot help until the user acts
        (err(KafkaError.TOPIC_AUTHORIZATION_FAILED), ErrorAction.FATAL),
        (err(KafkaError.TOPIC_AUTHORIZATION_FAILED, retriable=True), ErrorAction.FATAL),
        (err(KafkaError._AUTHENTICATION), ErrorAction.FATAL),
        (err(KafkaError.SASL_AUTHENTICATION_FAILED), ErrorAction.FATAL),
    ],
)
def test_classify_kafka_errors(error, action):
    assert classify(error) is action
    assert classify(KafkaException(error)) is action


def test_classify_non_kafka_exceptions_abort():
    assert classify(ValueError("x")) is ErrorAction.ABORT
    assert classify(KafkaException("no error object")) is ErrorAction.ABORT


def test_classify_typed_errors_keep_their_action():
    assert (
        classify(KafkaConnectorError("f", action="fatal", code=KafkaCode.PRODUCER_FENCED))
        is ErrorAction.FATAL
    )
    assert (
        classify(KafkaConnectorError("w", action="retry", code=KafkaCode.WRITE))
        is ErrorAction.RETRY
    )


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

    with pytest.raises(KafkaConnectorError, check=lambda e: e.code is KafkaCode.WRITE) as info:
        call_with_retry("commit", always)
    assert len(calls) == classify_mod.RETRY_ATTEMPTS
    assert info.value.action == "abort"
    assert "commit" in str(info.value)


def test_call_with_retry_does_not_retry_abortable_or_fatal(no_wait):
    for error, typ, action in [
        (err(KafkaError.UNKNOWN, abort=True), KafkaCode.WRITE, "abort"),
        (err(KafkaError._FENCED), KafkaCode.PRODUCER_FENCED, "fatal"),
    ]:
        calls = []

        def fail(error=error, calls=calls):
            calls.append(1)
            raise KafkaException(error)

        with pytest.raises(KafkaConnectorError) as info:
            call_with_retry("op", fail)
        assert calls == [1]
        assert info.value.code is typ and info.value.action == action
        assert info.value.kafka_code == error.code()


def test_call_with_retry_keeps_retrying_for_the_restart_window(monkeypatch):
    monkeypatch.setattr(classify_mod, "RETRY_WAIT_MIN_S", 0.0)
    monkeypatch.setattr(classify_mod, "RETRY_WAIT_MAX_S", 0.0)
    monkeypatch.setattr(classify_mod, "BROKER_RESTART_WAIT_S", 0.3)
    calls = []

    def always():
        calls.append(1)
        raise KafkaException(err(KafkaError._TRANSPORT))

    with pytest.raises(
        KafkaConnectorError, match="0s of retries", check=lambda e: e.code is KafkaCode.WRITE
    ):
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
        (err(KafkaError.NOT_ENOUGH_REPLICAS, abort=True), True),
        (err(KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, abort=True), True),
        (err(KafkaError.NOT_ENOUGH_REPLICAS, fatal=True), False),
        (err(KafkaError.MSG_SIZE_TOO_LARGE, abort=True), False),
        (err(KafkaError.TOPIC_AUTHORIZATION_FAILED), False),
        (err(KafkaError._FENCED), False),
        (err(KafkaError._UNKNOWN_TOPIC, fatal=True), False),
    ],
)
def test_broker_restart_errors_are_told_by_code(error, restart):
    assert classify_mod.broker_restart(error) is restart
    assert classify_mod.broker_restart(KafkaException(error)) is restart
    typed = KafkaConnectorError(
        "commit failed", action=classify(error), kafka_code=error.code(), code=KafkaCode.WRITE
    )
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


# -- authentication and authorization: typed, fatal, naming what to fix -------------------
@pytest.mark.parametrize(
    "code", [KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL]
)
def test_failed_authentication_is_a_typed_fatal_error_naming_the_settings(code):
    exc = KafkaException(err(code))
    assert classify(exc) is ErrorAction.FATAL
    typed = to_write_error(exc, "init_transactions(s-0)")
    assert typed.code is KafkaCode.AUTHENTICATION
    assert typed.action is ErrorAction.FATAL and typed.kafka_code == code
    assert not can_retry_stage(typed)
    text = str(typed)
    assert "authentication failed" in text and "init_transactions(s-0)" in text
    for setting in ("sasl.username", "sasl.password", "security.protocol", "client_config"):
        assert setting in text
    assert pickle.loads(pickle.dumps(typed)).__dict__ == typed.__dict__


@pytest.mark.parametrize(
    ("code", "acl"),
    [
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "WRITE and DESCRIBE on the output topic"),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, "'{sink_id}.marker.{partition}'"),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE_CONFIGS"),
        (
            KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "transactional ids '{sink_id}-{partition}'",
        ),
    ],
)
def test_refused_authorization_is_a_typed_fatal_error_naming_the_acl(code, acl):
    # librdkafka flags TRANSACTIONAL_ID_AUTHORIZATION_FAILED fatal: it must not read "fenced".
    exc = KafkaException(err(code, fatal=code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    assert classify(exc) is ErrorAction.FATAL
    typed = to_write_error(exc, "commit_transaction")
    assert typed.code is KafkaCode.AUTHORIZATION and typed.kafka_code == code
    assert typed.action is ErrorAction.FATAL
    assert "not authorized" in str(typed) and acl in str(typed) and "fenced" not in str(typed)
    assert not can_retry_stage(typed)
    assert pickle.loads(pickle.dumps(typed)).__dict__ == typed.__dict__


def test_call_with_retry_raises_the_typed_access_error_at_once(no_wait):
    calls = []

    def refused():
        calls.append(1)
        raise KafkaException(err(KafkaError.SASL_AUTHENTICATION_FAILED))

    with pytest.raises(KafkaConnectorError, check=lambda e: e.code is KafkaCode.AUTHENTICATION):
        call_with_retry("init_transactions", refused)
    assert len(calls) == 1


def test_an_already_typed_access_error_is_raised_as_it_is():
    typed = to_write_error(KafkaException(err(KafkaError.GROUP_AUTHORIZATION_FAILED)), "x")
    with pytest.raises(
        KafkaConnectorError, check=lambda e: e.code is KafkaCode.AUTHORIZATION
    ) as info:
        raise_if_denied(typed, "again")
    assert info.value is typed
    raise_if_denied(KafkaException(err(KafkaError._TIMED_OUT)), "not an access error")


def test_a_fatal_error_raised_out_of_flush_between_delivery_callbacks_stays_fatal():
    # confluent-kafka can raise a fenced producer's fatal error out of flush() while it still
    # calls delivery callbacks: the next callback then fails with SystemError, whose context
    # is the KafkaException. The classifier must see the fatal error, not an unknown one.
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    try:
        try:
            raise fenced
        except KafkaException:
            raise SystemError("<method 'append' of 'list' objects> returned a result") from None
    except SystemError as exc:
        exc.__context__ = fenced
        wrapped = exc
    assert classify(wrapped) is ErrorAction.FATAL
    assert classify(SystemError("no Kafka error in its context")) is ErrorAction.ABORT


@pytest.mark.parametrize(
    ("code", "stale"),
    [
        (KafkaError._UNKNOWN_TOPIC, True),
        (KafkaError._UNKNOWN_PARTITION, True),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, True),
        (KafkaError.NOT_LEADER_FOR_PARTITION, False),
        (KafkaError._TIMED_OUT, False),
    ],
)
def test_stale_topic_verdict_names_the_unknown_topic_codes(code, stale):
    """Issue 38: the codes after which a long-lived client is replaced, raised or delivered."""
    assert stale_topic_verdict(KafkaException(KafkaError(code))) is stale
    assert stale_topic_verdict(KafkaError(code)) is stale
    assert stale_topic_verdict(RuntimeError("Unknown topic")) is False  # codes, not text


def test_call_bounded_returns_the_value_and_raises_the_error_of_a_call_that_returns():
    assert call_bounded("op", lambda: 7, 1.0) == 7
    with pytest.raises(KafkaException):
        call_bounded("op", _raise_transient, 1.0)


def _raise_transient() -> None:
    raise KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT, "slow", retriable=True))


def test_call_bounded_gives_up_on_a_call_stuck_past_its_timeout(monkeypatch):
    # librdkafka #5511: send_offsets_to_transaction can block far past its own timeout.
    monkeypatch.setattr(classify_mod, "HUNG_CALL_MARGIN_S", 0.05)
    release = threading.Event()
    try:
        with pytest.raises(KafkaConnectorError) as caught:
            call_bounded("send_offsets_to_transaction", release.wait, 0.05)
    finally:
        release.set()
    assert caught.value.action is ErrorAction.FATAL  # drop the producer, open a new one
    assert caught.value.code is KafkaCode.WRITE
    assert caught.value.kafka_code == KafkaError._TIMED_OUT
    assert classify(caught.value) is ErrorAction.FATAL
    # call_with_retry passes it on at once: retrying a stuck client cannot help
    stuck = threading.Event()
    calls = []

    def stuck_call() -> None:
        calls.append(1)
        call_bounded("op", stuck.wait, 0.05)

    try:
        with pytest.raises(KafkaConnectorError):
            call_with_retry("op", stuck_call)
    finally:
        stuck.set()
    assert calls == [1]


def test_a_participant_stuck_in_send_offsets_drops_its_producer(monkeypatch):
    from connectors.kafka._sink import _transactional

    monkeypatch.setattr(classify_mod, "HUNG_CALL_MARGIN_S", 0.05)
    monkeypatch.setattr(_transactional, "TXN_CALL_TIMEOUT_S", 0.05)
    release = threading.Event()

    class Stuck:
        def send_offsets_to_transaction(self, offsets, group, timeout):
            release.wait()

    class Participant:
        dropped = False

        def _live(self):
            return Stuck()

        def _drop(self):
            self.dropped = True

    part = Participant()
    try:
        with pytest.raises(KafkaConnectorError) as caught:
            _transactional.TransactionalKafkaParticipant._send_offsets(
                part,  # type: ignore[arg-type]
                [],
                object(),
                "send_offsets_to_transaction",
            )
    finally:
        release.set()
    assert caught.value.action is ErrorAction.FATAL
    assert part.dropped  # never called again: the epoch's retry opens a new producer
