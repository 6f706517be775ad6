"""One place that decides what to do about a Kafka error (the sink and the source ask it).

Every Kafka failure maps to exactly one of three actions, :class:`txn.ErrorAction` (never
by matching message text, only by error code and librdkafka's flags):

1. ``RETRY``: transient (``retriable()``, timeouts, a coordinator moving, too few
   in-sync replicas while brokers are away); repeat the same call within a bound
   (``connectors.stage``'s retry engine), then escalate to ``ABORT``.
2. ``ABORT``: the transaction cannot be committed (``txn_requires_abort()``, a
   rejected record, anything unknown and not retriable); abort it, fail the epoch and
   let Spark retry it (the retry redoes or skips by marker).
3. ``FATAL``: this producer instance is finished (``fatal()``, fenced by a newer
   instance of the same transactional id); drop it and create a new one, never call
   anything on it again. Failed authentication and refused authorization are FATAL too,
   and their typed errors (:class:`KafkaCode.AUTHENTICATION`,
   :class:`KafkaCode.AUTHORIZATION`) stop the query: they name the settings to fix or
   the ACL to grant, and retrying cannot help until then.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from connectors.kafka._errors import WRITE_CODES, KafkaCode, KafkaConnectorError

# The cases of a refused authentication or authorization (both FATAL).
ACCESS_CODES = frozenset({KafkaCode.AUTHENTICATION, KafkaCode.AUTHORIZATION})
from connectors.stage._retry import RetryBound, retry
from txn import ErrorAction

T = TypeVar("T")

_log = logging.getLogger("connectors.kafka")

# Attempts of one retriable Kafka call at least before it is escalated to an abort; each
# attempt already waits up to its own librdkafka timeout, so a few are plenty.
RETRY_ATTEMPTS = 5
# Seconds a retriable Kafka call (and a transaction of the epoch log that failed with a
# broker-restart code) keeps being retried before it is escalated: a restarted broker
# accepts connections within seconds, and a loaded Kafka broker reloads its topics and
# coordinators within tens of seconds (Kafka's own clients wait max.block.ms = 60 s).
# The bound of one call is this plus the timeout of its last attempt.
BROKER_RESTART_WAIT_S = 60.0
# Seconds of exponential back-off between retries (first wait, upper bound).
RETRY_WAIT_MIN_S = 0.2
RETRY_WAIT_MAX_S = 5.0
# Seconds past a call's own timeout before the kit stops waiting for it: librdkafka 2.x
# can block send_offsets_to_transaction far past its timeout once the broker it cached as
# the group coordinator stops and leaves the cluster's Metadata (issues #5511, #5456).
HUNG_CALL_MARGIN_S = 10.0


# librdkafka's local (client-side) error codes are spelled with a leading underscore.
FENCED = KafkaError._FENCED  # noqa: SLF001
FATAL = KafkaError._FATAL  # noqa: SLF001
TIMED_OUT = KafkaError._TIMED_OUT  # noqa: SLF001
TRANSPORT = KafkaError._TRANSPORT  # noqa: SLF001
ALL_BROKERS_DOWN = KafkaError._ALL_BROKERS_DOWN  # noqa: SLF001
PARTITION_EOF = KafkaError._PARTITION_EOF  # noqa: SLF001
UNKNOWN_TOPIC = KafkaError._UNKNOWN_TOPIC  # noqa: SLF001
UNKNOWN_PARTITION = KafkaError._UNKNOWN_PARTITION  # noqa: SLF001
RESOLVE = KafkaError._RESOLVE  # noqa: SLF001
AUTHENTICATION = KafkaError._AUTHENTICATION  # noqa: SLF001
SSL = KafkaError._SSL  # noqa: SLF001
MSG_TIMED_OUT = KafkaError._MSG_TIMED_OUT  # noqa: SLF001

# Codes of a failed authentication (SASL or TLS): retrying with the same settings cannot
# help; the user fixes the credentials or the security settings.
AUTHENTICATION_CODES = frozenset(
    {
        AUTHENTICATION,
        SSL,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.ILLEGAL_SASL_STATE,
        KafkaError.UNSUPPORTED_SASL_MECHANISM,
    }
)
# Codes of an operation an ACL refused, each with the ACL the kit's clients need for it
# (docs/deploying.md, "ACLs"; ``eos preflight --sink-id`` lists the names).
AUTHORIZATION_ACLS = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: (
        "WRITE and DESCRIBE on the output topics, READ and DESCRIBE on the marker and "
        "epoch-log topics (WRITE too on the epoch log) and on every topic read, CREATE on "
        "the topics the kit creates if missing"
    ),
    KafkaError.GROUP_AUTHORIZATION_FAILED: (
        "READ and DESCRIBE on the marker consumer groups '{sink_id}.marker.{partition}' "
        "(a PREFIXED ACL on '{sink_id}.') and on the kit's reader groups"
    ),
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: (
        "on the cluster: IDEMPOTENT_WRITE (brokers before Kafka 3.0), DESCRIBE_CONFIGS "
        "(the preflight reads transaction.max.timeout.ms) and CREATE to create topics"
    ),
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (
        "WRITE and DESCRIBE on the transactional ids '{sink_id}-{partition}' and "
        "'{sink_id}.coordinator' (a PREFIXED ACL on '{sink_id}')"
    ),
}
AUTHORIZATION_CODES = frozenset(AUTHORIZATION_ACLS)
# Codes of a connection that could not be made (wrong host or port, nothing listening).
CONNECTION_CODES = frozenset({RESOLVE, TRANSPORT, ALL_BROKERS_DOWN})
# Codes of acks=all writes while fewer replicas are in sync than the topic's
# min.insync.replicas (brokers away): transient like a moving leader, so treated as a
# restart code (RETRY when a call fails with one, and a transaction that failed with one is
# aborted and begun again within the bound); the write was not acknowledged, and the
# idempotent producer's sequence numbers keep its retry from duplicating it.
REPLICATION_SHORTFALL_CODES = frozenset(
    {KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
)
# Codes of a client's "this topic does not exist" verdict (issue 38): after a broker
# restart a long-lived librdkafka client can keep it for minutes while the broker has the
# topic again (docs/kafka-semantics.md, "A stale Unknown-topic verdict"); a new client
# instance does not carry it. See ``stale_topic_verdict``.
STALE_TOPIC_CODES = frozenset({UNKNOWN_TOPIC, UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART})
# Codes a broker restart produces while the broker is away or reloads its topics and
# coordinators: a transaction that failed with one of them (librdkafka then requires an
# abort) can be begun again once the broker is back; see ``retry_transaction``.
RESTART_CODES = frozenset(
    {
        TIMED_OUT,
        TRANSPORT,
        ALL_BROKERS_DOWN,
        MSG_TIMED_OUT,
        UNKNOWN_TOPIC,
        UNKNOWN_PARTITION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        # The restarted broker lost or truncated the idempotent producer's state; the
        # abort bumps the producer epoch, after which the sequence starts afresh.
        KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
        KafkaError.UNKNOWN_PRODUCER_ID,
        *REPLICATION_SHORTFALL_CODES,
    }
)
# Delivery errors of records purged because their transaction failed (not a cause).
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})  # noqa: SLF001

# Codes that mean "a newer producer with this transactional id exists": the instance
# is dead even when librdkafka does not flag the error fatal (for example in replies
# to EndTxn or AddOffsetsToTxn).
_FENCED_CODES = frozenset(
    {
        FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.INVALID_TXN_STATE,
    }
)

# Codes of a refused authentication or authorization: FATAL (see the module doc).
_ACCESS_CODES = AUTHENTICATION_CODES | AUTHORIZATION_CODES

# Transient codes librdkafka does not always flag retriable on transactional APIs.
_TRANSIENT_CODES = frozenset(
    {
        TIMED_OUT,
        TRANSPORT,
        ALL_BROKERS_DOWN,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.CONCURRENT_TRANSACTIONS,
        KafkaError.UNSTABLE_OFFSET_COMMIT,
        *REPLICATION_SHORTFALL_CODES,
    }
)


def kafka_error_of(exc: BaseException) -> KafkaError | None:
    """Return the ``KafkaError`` carried by ``exc``, if any.

    A ``SystemError`` whose context is a ``KafkaException`` carries that one: confluent-kafka
    can raise a fatal error (a fenced producer) out of ``flush`` while it still calls the
    delivery callbacks, and the next callback's first call then fails with ``SystemError``.
    """
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    if isinstance(exc, SystemError) and isinstance(exc.__context__, KafkaException):
        return kafka_error_of(exc.__context__)
    return None


def classify(error: KafkaError | BaseException) -> ErrorAction:
    """Map a Kafka error (or an exception carrying one) to the action the sink takes.

    Contract: fatal and fenced win over abortable, abortable wins over retriable; an
    exception that carries no ``KafkaError`` is an ``ABORT`` (fail the epoch, never
    continue blindly).
    """
    if isinstance(error, KafkaConnectorError) and error.code is KafkaCode.PRODUCER_FENCED:
        return ErrorAction.FATAL
    if isinstance(error, KafkaConnectorError) and error.code in WRITE_CODES:
        return error.action
    err = error if isinstance(error, KafkaError) else kafka_error_of(error)
    if err is None:
        return ErrorAction.ABORT
    if err.fatal() or err.code() in _FENCED_CODES or err.code() in _ACCESS_CODES:
        return ErrorAction.FATAL
    if err.txn_requires_abort():
        return ErrorAction.ABORT
    if err.retriable() or err.code() in _TRANSIENT_CODES:
        return ErrorAction.RETRY
    return ErrorAction.ABORT


def fix_authentication(config_option: str) -> str:
    """Return what to fix after a failed authentication, in ``config_option``."""
    return (
        "check security.protocol, sasl.mechanism, sasl.username and sasl.password (or the "
        f"ssl.* certificate settings) in {config_option}"
    )


def access_error(
    exc: KafkaError | BaseException, what: str, config_option: str = "client_config"
) -> KafkaConnectorError | None:
    """Return the typed error of a failed authentication or authorization, else None.

    ``KafkaCode.AUTHENTICATION`` names the settings of ``config_option`` to fix,
    ``KafkaCode.AUTHORIZATION`` the ACL to grant; both are FATAL.
    """
    if isinstance(exc, KafkaConnectorError) and exc.code in ACCESS_CODES:
        return exc
    code = code_of(exc)
    if code in AUTHENTICATION_CODES:
        msg = f"{what}: authentication failed ({exc}); {fix_authentication(config_option)}"
        return KafkaConnectorError(
            msg, setting=config_option, kafka_code=code, code=KafkaCode.AUTHENTICATION
        )
    if code in AUTHORIZATION_ACLS:
        msg = f"{what}: not authorized ({exc}); grant the client's principal {AUTHORIZATION_ACLS[code]}"
        return KafkaConnectorError(msg, kafka_code=code, code=KafkaCode.AUTHORIZATION)
    return None


def raise_if_denied(
    exc: KafkaError | BaseException, what: str, config_option: str = "client_config"
) -> None:
    """Raise :func:`access_error`'s typed error for ``exc``, if it is one (chained to ``exc``)."""
    denied = access_error(exc, what, config_option)
    if denied is None:
        return
    if denied is exc:
        raise denied
    raise denied from (exc if isinstance(exc, BaseException) else None)


def to_write_error(exc: BaseException, what: str) -> KafkaConnectorError:
    """Wrap ``exc`` in the typed error of its action; ``what`` names the failed call."""
    denied = access_error(exc, what)
    if denied is not None:
        return denied
    action = classify(exc)
    err = kafka_error_of(exc)
    code = err.code() if err is not None else None
    if action is ErrorAction.FATAL:
        msg = (
            f"{what}: producer fenced or in a fatal state ({exc}); a newer instance of this "
            "transactional id took over, or the producer is broken. This instance stops; the "
            "epoch is retried with a new producer."
        )
        return KafkaConnectorError(
            msg, action=action, kafka_code=code, code=KafkaCode.PRODUCER_FENCED
        )
    msg = f"{what} failed ({action.value}): {exc}"
    return KafkaConnectorError(msg, action=action, kafka_code=code, code=KafkaCode.WRITE)


def _bound() -> RetryBound:
    """At least ``RETRY_ATTEMPTS`` attempts, and retry until ``BROKER_RESTART_WAIT_S`` passed."""
    return RetryBound(
        attempts=RETRY_ATTEMPTS,
        window_s=BROKER_RESTART_WAIT_S,
        wait_min_s=RETRY_WAIT_MIN_S,
        wait_max_s=RETRY_WAIT_MAX_S,
    )


def _retriable(exc: BaseException) -> bool:
    return classify(exc) is ErrorAction.RETRY


def call_with_retry(what: str, fn: Callable[[], T]) -> T:
    """Run ``fn``; retry RETRY-class errors (``connectors.stage``'s engine), then raise typed.

    Inside an epoch step (``step_budget``) the step's one time budget bounds the retries.

    Raises:
        KafkaConnectorError: ``KafkaCode.WRITE``, the call failed with an ABORT-class
            error, or kept failing with RETRY-class errors (escalated to abort);
            ``KafkaCode.PRODUCER_FENCED``, the producer is fenced or fatal.

    """
    try:
        return retry(fn, bound=_bound(), retriable=_retriable)
    except KafkaException as exc:
        err = to_write_error(exc, what)
        if err.action is ErrorAction.RETRY:
            msg = (
                f"{what} still failing after {BROKER_RESTART_WAIT_S:.0f}s of retries: {exc}; "
                "aborting the epoch"
            )
            err = KafkaConnectorError(
                msg, action=ErrorAction.ABORT, kafka_code=err.kafka_code, code=KafkaCode.WRITE
            )
        raise err from exc


def call_bounded(what: str, fn: Callable[[], T], timeout_s: float) -> T:
    """Run ``fn`` (a client call given ``timeout_s``), never waiting much past that timeout.

    The call runs on a daemon thread. If it has not returned ``HUNG_CALL_MARGIN_S`` after
    its own timeout, the client is stuck inside librdkafka: the caller gets a FATAL error
    (drop the client, never call it again; the epoch's retry opens a new one) and the
    thread is left to the call, holding the client, until the process ends.

    Raises:
        KafkaConnectorError: ``KafkaCode.WRITE``, action FATAL and ``kafka_code``
            ``_TIMED_OUT``, when the call did not return; else
            whatever ``fn`` raised.

    """
    done = threading.Event()
    outcome: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name=f"eos-bounded-{what}", daemon=True).start()
    if not done.wait(timeout_s + HUNG_CALL_MARGIN_S):
        msg = (
            f"{what} did not return {timeout_s + HUNG_CALL_MARGIN_S:.0f}s after it was "
            "called (librdkafka can hang there once a broker it cached as a coordinator "
            "stops); the producer is abandoned and the epoch redone with a new one"
        )
        raise KafkaConnectorError(
            msg, action=ErrorAction.FATAL, kafka_code=TIMED_OUT, code=KafkaCode.WRITE
        )
    returned, value = outcome[0]
    if returned:
        return value  # type: ignore[return-value]
    assert isinstance(value, BaseException)  # noqa: S101 - run() stores only these
    raise value


def code_of(exc: KafkaError | BaseException) -> int | None:
    """Return the Kafka error code carried by ``exc`` (a typed write error's too), if any."""
    if isinstance(exc, KafkaConnectorError):
        return exc.kafka_code
    err = exc if isinstance(exc, KafkaError) else kafka_error_of(exc)
    return err.code() if err is not None else None


def broker_restart(exc: KafkaError | BaseException) -> bool:
    """Return whether ``exc`` is what a broker restart causes (and not fenced or fatal).

    Such a failed transaction was not committed; once aborted it may be begun again.
    """
    if classify(exc) is ErrorAction.FATAL:
        return False
    return classify(exc) is ErrorAction.RETRY or code_of(exc) in RESTART_CODES


def stale_topic_verdict(exc: KafkaError | BaseException) -> bool:
    """Return whether ``exc`` may be a client's stale Unknown-topic verdict (issue 38).

    A long-lived client that failed so is replaced by a new instance before it tries
    again (same settings, same transactional id): the new one asks the brokers afresh,
    where the old one would refuse the topic until ``topic.metadata.refresh.interval.ms``.
    """
    return code_of(exc) in STALE_TOPIC_CODES


def with_delivery_cause(exc: BaseException, failed: list[KafkaError]) -> BaseException:
    """Return the error a failed transaction is classified by: its records' delivery error.

    librdkafka fails the commit of a transaction whose records were not delivered with
    ``_INCONSISTENT`` ("message(s) failed delivery"); the reason (the topic unknown while
    a broker reloads, a timeout, a record too large) is only in the delivery reports. The
    result carries the first delivery error's code, abortable; ``exc`` itself when no
    record failed (records purged by the failed transaction itself are consequences, not
    causes) or the producer is fenced or fatal.
    """
    causes = [e for e in failed if e.code() not in _PURGED]
    if not causes or classify(exc) is ErrorAction.FATAL:
        return exc
    cause = causes[0]
    return KafkaException(
        KafkaError(
            cause.code(),
            f"{exc}; first failed delivery: {cause.str()}",
            txn_requires_abort=True,
        )
    )


def retry_over_restart(what: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` again while it fails with a broker-restart error, for ``BROKER_RESTART_WAIT_S``.

    ``fn`` is a whole transaction that aborts itself when it fails (:func:`broker_restart`
    says which errors leave it uncommitted). Every other error, and the last one after the bound, is raised as it is.
    """
    return retry(
        fn,
        bound=_bound(),
        retriable=broker_restart,
        on_retry=lambda exc, attempt: _log.warning(
            "%s failed (%s); the broker may be restarting, retrying (attempt %d)",
            what,
            exc,
            attempt,
        ),
    )
