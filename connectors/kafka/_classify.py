"""One place that decides what to do about a Kafka error (the sink and the source ask it).

Every Kafka failure maps to exactly one of three actions, :class:`txn.ErrorAction` (never
by matching message text, only by error code and librdkafka's flags):

1. ``RETRY``: transient (``retriable()``, timeouts, a coordinator moving); repeat the
   same call a bounded number of times (tenacity), then escalate to ``ABORT``.
2. ``ABORT``: the transaction cannot be committed (``txn_requires_abort()``, a
   rejected record, anything unknown and not retriable); abort it, fail the epoch and
   let Spark retry it (the retry redoes or skips by marker).
3. ``FATAL``: this producer instance is finished (``fatal()``, fenced by a newer
   instance of the same transactional id); drop it and create a new one, never call
   anything on it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import tenacity
from confluent_kafka import KafkaError, KafkaException

from connectors.kafka._errors import KafkaWriteError, ProducerFencedError
from txn import ErrorAction

T = TypeVar("T")

# Attempts of one retriable Kafka call before it is escalated to an abort; each
# attempt already waits up to its own librdkafka timeout, so a few are plenty.
RETRY_ATTEMPTS = 5
# Seconds of exponential back-off between retries (first wait, upper bound).
RETRY_WAIT_MIN_S = 0.2
RETRY_WAIT_MAX_S = 5.0


# librdkafka's local (client-side) error codes are spelled with a leading underscore.
FENCED = KafkaError._FENCED  # noqa: SLF001
TIMED_OUT = KafkaError._TIMED_OUT  # noqa: SLF001
TRANSPORT = KafkaError._TRANSPORT  # noqa: SLF001
ALL_BROKERS_DOWN = KafkaError._ALL_BROKERS_DOWN  # noqa: SLF001
PARTITION_EOF = KafkaError._PARTITION_EOF  # noqa: SLF001
UNKNOWN_TOPIC = KafkaError._UNKNOWN_TOPIC  # noqa: SLF001
UNKNOWN_PARTITION = KafkaError._UNKNOWN_PARTITION  # noqa: SLF001

# Codes that mean "a newer producer with this transactional id exists": the instance
# is dead even when librdkafka does not flag the error fatal (for example in replies
# to EndTxn or AddOffsetsToTxn).
_FENCED_CODES = frozenset(
    {
        FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.INVALID_TXN_STATE,
    }
)

# Transient codes librdkafka does not always flag retriable on transactional APIs.
_TRANSIENT_CODES = frozenset(
    {
        TIMED_OUT,
        TRANSPORT,
        ALL_BROKERS_DOWN,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.CONCURRENT_TRANSACTIONS,
        KafkaError.UNSTABLE_OFFSET_COMMIT,
    }
)


def kafka_error_of(exc: BaseException) -> KafkaError | None:
    """Return the ``KafkaError`` carried by ``exc``, if any."""
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def classify(error: KafkaError | BaseException) -> ErrorAction:
    """Map a Kafka error (or an exception carrying one) to the action the sink takes.

    Contract: fatal and fenced win over abortable, abortable wins over retriable; an
    exception that carries no ``KafkaError`` is an ``ABORT`` (fail the epoch, never
    continue blindly).
    """
    if isinstance(error, ProducerFencedError):
        return ErrorAction.FATAL
    if isinstance(error, KafkaWriteError):
        return error.action
    err = error if isinstance(error, KafkaError) else kafka_error_of(error)
    if err is None:
        return ErrorAction.ABORT
    if err.fatal() or err.code() in _FENCED_CODES:
        return ErrorAction.FATAL
    if err.txn_requires_abort():
        return ErrorAction.ABORT
    if err.retriable() or err.code() in _TRANSIENT_CODES:
        return ErrorAction.RETRY
    return ErrorAction.ABORT


def to_write_error(exc: BaseException, what: str) -> KafkaWriteError:
    """Wrap ``exc`` in the typed error of its action; ``what`` names the failed call."""
    action = classify(exc)
    err = kafka_error_of(exc)
    code = err.code() if err is not None else None
    if action is ErrorAction.FATAL:
        msg = (
            f"{what}: producer fenced or in a fatal state ({exc}); a newer instance of this "
            "transactional id took over, or the producer is broken. This instance stops; the "
            "epoch is retried with a new producer."
        )
        return ProducerFencedError(msg, action=action, code=code)
    msg = f"{what} failed ({action.value}): {exc}"
    return KafkaWriteError(msg, action=action, code=code)


def _should_retry(state: tenacity.RetryCallState) -> bool:
    outcome = state.outcome
    if outcome is None or not outcome.failed:
        return False
    exc = outcome.exception()
    return exc is not None and classify(exc) is ErrorAction.RETRY


def call_with_retry(what: str, fn: Callable[[], T]) -> T:
    """Run ``fn``; retry RETRY-class errors a bounded number of times, then raise typed.

    Raises:
        KafkaWriteError: the call failed with an ABORT-class error, or kept failing
            with RETRY-class errors (escalated to abort).
        ProducerFencedError: the producer is fenced or fatal.

    """
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(RETRY_ATTEMPTS),
        wait=tenacity.wait_exponential(min=RETRY_WAIT_MIN_S, max=RETRY_WAIT_MAX_S),
        retry=_should_retry,
        reraise=True,
    )
    try:
        return retrying(fn)
    except KafkaException as exc:
        err = to_write_error(exc, what)
        if err.action is ErrorAction.RETRY:
            msg = f"{what} still failing after {RETRY_ATTEMPTS} attempts: {exc}; aborting the epoch"
            err = KafkaWriteError(msg, action=ErrorAction.ABORT, code=err.code)
        raise err from exc
