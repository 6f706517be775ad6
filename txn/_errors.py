"""The one error shape of the kit: an error class per package, a code per case.

Each package of the kit raises one error class (``txn.TxnError`` here,
``connectors.stage.StageError``, ``connectors.kafka.KafkaConnectorError``, ...), and every
instance carries three things, as confluent-kafka-python's ``KafkaError`` does:

* ``code``: the case, an :class:`ErrorCode` member (``TxnCode.PLAN_MISMATCH``,
  ``StageCode.INPUT_SCHEMA``, ``KafkaCode.AUTHORIZATION``, ...); callers branch on it,
  never on the message;
* ``retry_stage``: whether running the write stage or the epoch again can help (the code
  decides: False for bad input, a replay that differs, a configuration mismatch, a fenced
  coordinator);
* ``action``: what the connector did about the failed call (:class:`ErrorAction`).

A connector raises a case of the core or of the stage with its own class and the shared
code (a Kafka epoch log taken over is a ``KafkaConnectorError`` with code
``TxnCode.EPOCH_LOG_LOCKED``), so one ``code`` test covers every connector. The errors
pickle by the default protocol (they travel from the write tasks to the driver): the
constructor takes the message alone, and the rest is instance state.

The core's cases (:class:`TxnCode`)::

    CONFIG                     bad option; fix the value named
    ILLEGAL_TRANSITION         a protocol step out of order
    EPOCH_LOG                  the epoch log cannot be read or written
    EPOCH_LOG_CORRUPT          a record is truncated or altered
    EPOCH_LOG_LOCKED           another coordinator owns (or took over) the log
    PLAN_MISMATCH              an in-doubt epoch is replayed with another sink config
    NON_DETERMINISTIC_REPLAY   a replayed batch differs from the committed one
    EPOCH_ABORTED              the epoch could not commit; it stays in doubt
    EPOCH_UNRESOLVED           an epoch in doubt cannot be settled without its query
    PARTICIPANT                a write partition failed
    PREPARED_WORK_LOST         a decided commit met neither work nor marker
"""

from __future__ import annotations

import enum
from typing import ClassVar


class ErrorAction(str, enum.Enum):
    """What a connector does about an error of its external system (one classifier each).

    * ``RETRY``: transient; repeat the same call a bounded number of times, then ABORT;
    * ``ABORT``: the open transaction cannot commit; abort it and fail the epoch (the
      retry or replay redoes it);
    * ``FATAL``: this client instance is finished (fenced, broken); drop it, never call it
      again, and recreate it for the retry.
    """

    RETRY = "retry"
    ABORT = "abort"
    FATAL = "fatal"


class ErrorCode(enum.Enum):
    """Base of each package's error codes: a member is ``(text, retry_stage)``.

    ``text`` is the code's stable name in messages and metrics; ``retry_stage`` says
    whether running the write stage again can help after an error of this case.
    """

    def __init__(self, text: str, retry_stage: bool) -> None:
        self.text = text
        self.retry_stage = retry_stage


class TxnCode(ErrorCode):
    """The cases of the two-phase-commit core (see the module docstring)."""

    ERROR = ("error", True)
    CONFIG = ("config", False)
    ILLEGAL_TRANSITION = ("illegal-transition", False)
    EPOCH_LOG = ("epoch-log", True)
    EPOCH_LOG_CORRUPT = ("epoch-log-corrupt", False)
    EPOCH_LOG_LOCKED = ("epoch-log-locked", False)
    PLAN_MISMATCH = ("plan-mismatch", False)
    NON_DETERMINISTIC_REPLAY = ("non-deterministic-replay", False)
    EPOCH_ABORTED = ("epoch-aborted", True)
    EPOCH_UNRESOLVED = ("epoch-unresolved", False)
    PARTICIPANT = ("participant", True)
    PREPARED_WORK_LOST = ("prepared-work-lost", False)


# Every case of the durable epoch log (a lock or a corruption is one too).
EPOCH_LOG_CODES = frozenset(
    {TxnCode.EPOCH_LOG, TxnCode.EPOCH_LOG_CORRUPT, TxnCode.EPOCH_LOG_LOCKED}
)


class TxnError(Exception):
    """Base class of every error raised by ``txn`` and by the kit's connectors.

    ``code`` is the case (an :class:`ErrorCode`; the class's ``default_code`` when not
    given; ``str()`` puts its text first, so a log line or a Spark trace names it), ``action`` what the connector did about the call (default: ``ABORT`` when a
    re-run can help, else ``FATAL``), ``column`` the input column and ``partition`` the
    write partition the error is about, when it is about one.
    """

    default_code: ClassVar[ErrorCode] = TxnCode.ERROR

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        action: ErrorAction | None = None,
        column: str | None = None,
        partition: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code: ErrorCode = code if code is not None else self.default_code
        retry = self.code.retry_stage
        self.action = (
            ErrorAction(action) if action else ErrorAction.ABORT if retry else ErrorAction.FATAL
        )
        self.column = column
        self.partition = partition

    def __str__(self) -> str:
        """Return the message after the code's text in brackets: ``[plan-mismatch] epoch 3 ...``."""
        return f"[{self.code.text}] {super().__str__()}"

    @property
    def retry_stage(self) -> bool:
        """Whether running the write stage or the epoch again can help (the code says)."""
        return self.code.retry_stage


def can_retry_stage(exc: BaseException) -> bool:
    """Return whether re-running the write stage can help after ``exc``.

    Errors of the kit say so in their code; any other exception (a lost executor, a
    network error) is assumed transient.
    """
    return bool(getattr(exc, "retry_stage", True))


def has_code(exc: BaseException, *codes: ErrorCode) -> bool:
    """Return whether ``exc`` is an error of the kit with one of ``codes``."""
    return getattr(exc, "code", None) in codes
