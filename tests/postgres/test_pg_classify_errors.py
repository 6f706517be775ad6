"""The one SQLSTATE classifier, the typed errors it builds, and the errors' pickling."""

from __future__ import annotations

import pickle

import psycopg
import pytest
from psycopg import errors

from connectors.postgres import PostgresCode, PostgresSinkError, _classify, classify
from connectors.postgres._classify import call_with_retry, to_sink_error
from connectors.stage import StageCode
from connectors.stage._errors import INPUT_CODES
from txn import ErrorAction, TxnCode, can_retry_stage, has_code


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
    assert c.code is PostgresCode.CONSTRAINT_VIOLATION and c.sqlstate == "23505"
    assert c.action is ErrorAction.ABORT and "nothing of it is visible" in str(c)
    v = to_sink_error(err("22003"), "writing")
    assert v.code is PostgresCode.INVALID_VALUE and not can_retry_stage(v)
    assert to_sink_error(err("42P01"), "writing").code is PostgresCode.TABLE_NOT_FOUND
    f = to_sink_error(err("28P01"), "connecting")
    assert f.code is PostgresCode.FATAL and not can_retry_stage(f)
    r = to_sink_error(err("40001"), "committing")
    assert r.code is PostgresCode.WRITE and r.action is ErrorAction.RETRY and can_retry_stage(r)
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

    with pytest.raises(
        PostgresSinkError, match="still failing after", check=lambda e: e.code is PostgresCode.WRITE
    ) as info:
        call_with_retry("down", down)
    assert info.value.action is ErrorAction.ABORT

    calls.clear()

    def bad() -> None:
        calls.append(1)
        raise err("23505")

    with pytest.raises(
        PostgresSinkError, check=lambda e: e.code is PostgresCode.CONSTRAINT_VIOLATION
    ):
        call_with_retry("bad", bad)
    assert len(calls) == 1  # an abort is never retried


ERRORS = [
    PostgresSinkError(
        "c",
        action=ErrorAction.ABORT,
        sqlstate="23505",
        column="id",
        code=PostgresCode.CONSTRAINT_VIOLATION,
    ),
    PostgresSinkError("w", action=ErrorAction.RETRY, sqlstate=None, code=PostgresCode.WRITE),
    PostgresSinkError("s", column="name", code=StageCode.INPUT_SCHEMA),
    PostgresSinkError("v", column="name", code=PostgresCode.VALUE_TOO_LARGE),
    PostgresSinkError("t", code=PostgresCode.TABLE_NOT_FOUND),
    PostgresSinkError("f", code=TxnCode.EPOCH_LOG_LOCKED),
    PostgresSinkError("l", code=TxnCode.PREPARED_WORK_LOST),
    PostgresSinkError("l", partition=3, code=TxnCode.PREPARED_WORK_LOST),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: e.code.name)
def test_errors_survive_pickling_with_their_attributes(error: Exception) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error)
    assert vars(back) == vars(error)


def test_error_families() -> None:
    schema_error = PostgresSinkError("s", column="x", code=StageCode.INPUT_SCHEMA)
    assert has_code(schema_error, StageCode.INPUT_SCHEMA) and schema_error.code in INPUT_CODES
    assert schema_error.column == "x" and not can_retry_stage(schema_error)
    assert not can_retry_stage(PostgresSinkError("v", code=PostgresCode.VALUE_TOO_LARGE))
    assert PostgresSinkError("r", code=StageCode.RECORD).code in INPUT_CODES
    locked = PostgresSinkError("f", code=TxnCode.EPOCH_LOG_LOCKED)
    assert has_code(locked, TxnCode.EPOCH_LOG_LOCKED) and not can_retry_stage(locked)
    assert PostgresSinkError("w").code is PostgresCode.ERROR and can_retry_stage(
        PostgresSinkError("w")
    )


def test_a_lost_prepared_transaction_is_txn_lost_work() -> None:
    lost = PostgresSinkError("l", partition=2, code=TxnCode.PREPARED_WORK_LOST)
    assert has_code(lost, TxnCode.PREPARED_WORK_LOST) and lost.partition == 2
    assert not can_retry_stage(lost)  # the replay redoes it, not a stage re-run
