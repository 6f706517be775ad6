"""One place that decides what to do about a PostgreSQL error.

Every failure maps to exactly one of the three :class:`txn.ErrorAction`, by SQLSTATE (its two-character class,
or the full code for the exceptions listed), never by message text:

1. ``RETRY``: transient (connection lost or refused, server shutting down or starting,
   serialization failure, deadlock, lock timeout, too many connections). Repeat the same
   *idempotent* operation on a new connection a bounded number of times (the retry engine of
   ``connectors.stage``), then
   escalate to ``ABORT``. Inside a task's data transaction nothing is retried: the
   transaction is gone with the error, so the epoch's partition is voted NO and redone.
2. ``ABORT``: the transaction cannot commit (bad value, violated constraint, missing
   table or column, statement timeout, out of prepared-transaction slots, anything
   unknown); abort it, fail the epoch, let Spark retry it.
3. ``FATAL``: retrying cannot help and continuing is wrong (authentication, a missing
   database, missing privileges, internal or I/O errors of the server); stop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import psycopg

from connectors.postgres._errors import WRITE_CODES, PostgresCode, PostgresSinkError
from connectors.stage._retry import RetryBound, retry
from txn import ErrorAction

T = TypeVar("T")

# Attempts of one idempotent operation before it is escalated to an abort; a PostgreSQL
# restart takes a few seconds, which the back-off below covers.
RETRY_ATTEMPTS = 6
# Seconds of exponential back-off between retries (first wait, upper bound).
RETRY_WAIT_MIN_S = 0.2
RETRY_WAIT_MAX_S = 5.0


# 08: connection exception; 28: invalid authorization; 3D: invalid catalog name (no such
# database); 58: system error (I/O); XX: internal error; F0: configuration file error.
_RETRY_CLASSES = frozenset({"08"})
_FATAL_CLASSES = frozenset({"28", "3D", "58", "XX", "F0"})
_RETRY_CODES = frozenset(
    {
        "57P01",  # admin_shutdown (server stopping, or the backend was terminated)
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now (server starting or in recovery)
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available (lock_timeout)
        "53300",  # too_many_connections
    }
)
_FATAL_CODES = frozenset({"42501"})  # insufficient_privilege


def sqlstate_of(exc: BaseException) -> str | None:
    """Return the SQLSTATE carried by ``exc`` (a psycopg error or a sink error), if any."""
    if isinstance(exc, PostgresSinkError):
        return exc.sqlstate
    if isinstance(exc, psycopg.Error):
        return exc.sqlstate
    return None


def classify(exc: BaseException) -> ErrorAction:
    """Map an exception to the action the sink takes (see the module docstring).

    Contract: a sink error keeps the action it was classified with; a psycopg error
    without SQLSTATE is a connection-level failure (``RETRY``) if it is an
    ``OperationalError`` or ``InterfaceError`` (closed connection), else ``ABORT``; any
    other exception is an ``ABORT`` (fail the epoch, never continue blindly).
    """
    if isinstance(exc, PostgresSinkError) and exc.code in WRITE_CODES:
        return exc.action
    if not isinstance(exc, psycopg.Error):
        return ErrorAction.ABORT
    code = exc.sqlstate
    if code is None:
        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            return ErrorAction.RETRY
        return ErrorAction.ABORT
    if code in _FATAL_CODES or code[:2] in _FATAL_CLASSES:
        return ErrorAction.FATAL
    if code in _RETRY_CODES or code[:2] in _RETRY_CLASSES:
        return ErrorAction.RETRY
    return ErrorAction.ABORT


def _describe(exc: BaseException) -> str:
    if not isinstance(exc, psycopg.Error):
        return f"{type(exc).__name__}: {exc}"
    diag = exc.diag
    parts = [diag.message_primary or str(exc).strip()]
    for label, value in (
        ("detail", diag.message_detail),
        ("hint", diag.message_hint),
        ("where", diag.context),
        ("table", diag.table_name),
        ("column", diag.column_name),
        ("constraint", diag.constraint_name),
    ):
        if value:
            parts.append(f"{label}: {value.strip()}")
    return "; ".join(parts)


def to_sink_error(exc: BaseException, what: str) -> PostgresSinkError:
    """Wrap ``exc`` in the typed error of its action; ``what`` names the failed operation."""
    if isinstance(exc, PostgresSinkError):
        return exc
    action = classify(exc)
    code = sqlstate_of(exc)
    column = exc.diag.column_name if isinstance(exc, psycopg.Error) else None
    text = f"{what} failed ({action.value}, SQLSTATE {code or 'none'}): {_describe(exc)}"
    if code == "42P01":
        return PostgresSinkError(
            f"{text}; create the table or fix table=/schema=", code=PostgresCode.TABLE_NOT_FOUND
        )
    if code is not None and code.startswith("23"):
        return PostgresSinkError(
            f"{text}; the epoch was rolled back, nothing of it is visible. Fix the rows or the "
            "table's constraint, then restart the query",
            action=action,
            sqlstate=code,
            column=column,
            code=PostgresCode.CONSTRAINT_VIOLATION,
        )
    if code is not None and code.startswith("22"):
        return PostgresSinkError(
            f"{text}; the epoch was rolled back, nothing of it is visible. Cast or clean the "
            "column in Spark, or widen the table column",
            action=action,
            sqlstate=code,
            column=column,
            code=PostgresCode.INVALID_VALUE,
        )
    if action is ErrorAction.FATAL:
        return PostgresSinkError(
            f"{text}; fix the connection settings, privileges or server, then restart",
            action=action,
            sqlstate=code,
            column=column,
            code=PostgresCode.FATAL,
        )
    return PostgresSinkError(
        text, action=action, sqlstate=code, column=column, code=PostgresCode.WRITE
    )


def _retriable(exc: BaseException) -> bool:
    return classify(exc) is ErrorAction.RETRY


def call_with_retry(what: str, fn: Callable[[], T]) -> T:
    """Run the idempotent operation ``fn``; retry RETRY-class errors, then raise typed.

    ``fn`` must open its own connection (a retry after a lost connection needs a new one).
    The engine is ``connectors.stage``'s (inside an epoch step, the step's budget bounds it).

    Raises:
        PostgresSinkError: ``fn`` failed with an ABORT or FATAL error, or kept failing with
            RETRY errors (escalated to abort).

    """
    bound = RetryBound(
        attempts=RETRY_ATTEMPTS,
        window_s=0.0,
        wait_min_s=RETRY_WAIT_MIN_S,
        wait_max_s=RETRY_WAIT_MAX_S,
    )
    try:
        return retry(fn, bound=bound, retriable=_retriable)
    except psycopg.Error as exc:
        err = to_sink_error(exc, what)
        if classify(exc) is ErrorAction.RETRY:
            msg = f"{err} (still failing after {RETRY_ATTEMPTS} attempts; aborting the epoch)"
            err = PostgresSinkError(
                msg, action=ErrorAction.ABORT, sqlstate=exc.sqlstate, code=PostgresCode.WRITE
            )
        raise err from exc
