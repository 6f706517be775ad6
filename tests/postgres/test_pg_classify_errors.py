"""The one SQLSTATE classifier, the typed errors it builds, and the errors' pickling."""

from __future__ import annotations

import pickle

import psycopg
import pytest
from psycopg import errors

from connectors.postgres import (
    ConstraintViolationError,
    InvalidValueError,
    PostgresEpochLogFencedError,
    PostgresFatalError,
    PostgresInputSchemaError,
    PostgresRecordError,
    PostgresTableNotFoundError,
    PostgresWriteError,
    PreparedTransactionLostError,
    ValueTooLargeError,
    _classify,
    call_with_retry,
    classify,
    to_sink_error,
)
from connectors.stage import InputError, InputSchemaError
from txn import EpochLogLockedError, ErrorAction, PreparedWorkLostError, can_retry_stage


def err(sqlstate: str) -> psycopg.Error:
    cls = errors.lookup(sqlstate)
    return cls(f"server says something for {sqlstate}")


@pytest.mark.parametrize(
    ("sqlstate", "action"),
    [
        ("08006", ErrorAction.RETRY),  # connection_failure
        ("08001", ErrorAction.RETRY),  # sqlclient_unable_to_establish_sqlconnection
        ("57P01", ErrorAction.RETRY),  # admin_shutdown
        ("57P03", ErrorAction.RETRY),  # cannot_connect_now
        ("40001", ErrorAction.RETRY),  # serialization_failure
        ("40P01", ErrorAction.RETRY),  # deadlock_detected
        ("55P03", ErrorAction.RETRY),  # lock_not_available
        ("53300", ErrorAction.RETRY),  # too_many_connections
        ("23505", ErrorAction.ABORT),  # unique_violation
        ("23502", ErrorAction.ABORT),  # not_null_violation
        ("22001", ErrorAction.ABORT),  # string_data_right_truncation
        ("22003", ErrorAction.ABORT),  # numeric_value_out_of_range
        ("42P01", ErrorAction.ABORT),  # undefined_table
        ("42703", ErrorAction.ABORT),  # undefined_column
        ("57014", ErrorAction.ABORT),  # query_canceled (statement_timeout)
        ("53200", ErrorAction.ABORT),  # out_of_memory (also: no prepared-transaction slot)
        ("0A000", ErrorAction.ABORT),  # feature_not_supported (PREPARE after a TEMP table)
        ("28P01", ErrorAction.FATAL),  # invalid_password
        ("3D000", ErrorAction.FATAL),  # invalid_catalog_name (no such database)
        ("42501", ErrorAction.FATAL),  # insufficient_privilege
        ("XX001", ErrorAction.FATAL),  # data_corrupted
        ("58030", ErrorAction.FATAL),  # io_error
    ],
)
def test_classification_is_by_sqlstate(sqlstate: str, action: ErrorAction) -> None:
    assert classify(err(sqlstate)) is action


def test_errors_without_sqlstate() -> None:
    assert classify(psycopg.OperationalError("server closed the connection")) is ErrorAction.RETRY
    assert classify(psycopg.InterfaceError("the connection is closed")) is ErrorAction.RETRY
    assert classify(psycopg.ProgrammingError("bad query")) is ErrorAction.ABORT
    assert classify(ValueError("not from the database")) is ErrorAction.ABORT


def test_message_text_never_decides() -> None:
    # A unique violation whose text talks about connections is still an abort.
    assert classify(errors.UniqueViolation("connection reset by peer")) is ErrorAction.ABORT


def test_typed_errors_carry_action_and_sqlstate() -> None:
    c = to_sink_error(err("23505"), "writing")
    assert isinstance(c, ConstraintViolationError) and c.sqlstate == "23505"
    assert c.action is ErrorAction.ABORT and "nothing of it is visible" in str(c)
    v = to_sink_error(err("22003"), "writing")
    assert isinstance(v, InvalidValueError) and not can_retry_stage(v)
    assert isinstance(to_sink_error(err("42P01"), "writing"), PostgresTableNotFoundError)
    f = to_sink_error(err("28P01"), "connecting")
    assert isinstance(f, PostgresFatalError) and not can_retry_stage(f)
    r = to_sink_error(err("40001"), "committing")
    assert type(r) is PostgresWriteError and r.action is ErrorAction.RETRY and can_retry_stage(r)
    assert "committing failed (retry, SQLSTATE 40001)" in str(r)


def test_call_with_retry_retries_transient_errors_then_escalates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_classify, "RETRY_WAIT_MIN_S", 0)
    monkeypatch.setattr(_classify, "RETRY_WAIT_MAX_S", 0)
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise psycopg.OperationalError("connection refused")
        return "ok"

    assert call_with_retry("flaky", flaky) == "ok" and len(calls) == 3

    def down() -> None:
        raise err("57P03")

    with pytest.raises(PostgresWriteError, match="still failing after") as info:
        call_with_retry("down", down)
    assert info.value.action is ErrorAction.ABORT

    calls.clear()

    def bad() -> None:
        calls.append(1)
        raise err("23505")

    with pytest.raises(ConstraintViolationError):
        call_with_retry("bad", bad)
    assert len(calls) == 1  # an abort is never retried


ERRORS = [
    ConstraintViolationError("c", action=ErrorAction.ABORT, sqlstate="23505", column="id"),
    PostgresWriteError("w", action=ErrorAction.RETRY, sqlstate=None),
    PostgresInputSchemaError("s", column="name"),
    ValueTooLargeError("v", column="name"),
    PostgresTableNotFoundError("t"),
    PostgresEpochLogFencedError("f"),
    PreparedTransactionLostError("l"),
    PreparedTransactionLostError("l", partition=3),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_errors_survive_pickling_with_their_attributes(error: Exception) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error)
    assert vars(back) == vars(error)


def test_error_families() -> None:
    schema_error = PostgresInputSchemaError("s", column="x")
    assert isinstance(schema_error, InputSchemaError) and isinstance(schema_error, ValueError)
    assert isinstance(ValueTooLargeError("v"), PostgresRecordError)
    assert isinstance(PostgresRecordError("r"), InputError)
    assert not can_retry_stage(schema_error)
    assert isinstance(PostgresEpochLogFencedError("f"), EpochLogLockedError)
    assert not can_retry_stage(PostgresEpochLogFencedError("f"))


def test_a_lost_prepared_transaction_is_txn_lost_work() -> None:
    lost = PreparedTransactionLostError("l", partition=2)
    assert isinstance(lost, PreparedWorkLostError) and lost.partition == 2
    assert not can_retry_stage(lost)  # the replay redoes it, not a stage re-run
