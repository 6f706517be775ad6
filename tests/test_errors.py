"""The one error shape: each package's error class carries a code, an action and whether a
re-run helps, and survives pickling (errors cross from the write tasks to the driver)."""

from __future__ import annotations

import pickle

import pytest

from connectors.async_io import AsyncCode
from connectors.async_io._errors import row_error
from connectors.examples.sqlite import SqliteCode, SqliteSinkError
from connectors.kafka import KafkaCode, KafkaConnectorError
from connectors.lakehouse import LakehouseCode, LakehouseError
from connectors.postgres import PostgresCode, PostgresSinkError
from connectors.stage import StageCode, StageError
from connectors.stage._errors import INPUT_CODES
from txn import ErrorAction, ErrorCode, TxnCode, TxnError, can_retry_stage, has_code

ERRORS = [
    TxnError("p", code=TxnCode.PREPARED_WORK_LOST, partition=3),
    StageError("s", code=StageCode.INPUT_SCHEMA, column="value"),
    KafkaConnectorError(
        "k",
        code=KafkaCode.AUTHENTICATION,
        kafka_code=58,
        address="127.0.0.1:9092",
        setting="client_config",
    ),
    KafkaConnectorError("w", code=KafkaCode.WRITE, action=ErrorAction.RETRY, kafka_code=-195),
    PostgresSinkError(
        "g", code=PostgresCode.SCHEMA_EVOLUTION, column="id", needed="ALTER TABLE t ..."
    ),
    PostgresSinkError("c", code=PostgresCode.CONSTRAINT_VIOLATION, sqlstate="23505"),
    SqliteSinkError("q", code=SqliteCode.WRITE, action=ErrorAction.RETRY, sqlite_code=5),
    LakehouseError("l", code=LakehouseCode.COMMIT_FAILED),
    row_error(AsyncCode.REQUEST_FAILED, 1, 37, "HTTP 500"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: f"{type(e).__name__}-{e.code.name}")
def test_a_package_error_survives_pickling_with_every_attribute(error: TxnError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and vars(back) == vars(error)
    assert (str(back), back.code, back.action, back.retry_stage) == (
        str(error),
        error.code,
        error.action,
        error.retry_stage,
    )


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: f"{type(e).__name__}-{e.code.name}")
def test_the_message_leads_with_the_code(error: TxnError) -> None:
    assert str(error).startswith(f"[{error.code.text}] ")


def test_the_code_decides_whether_a_re_run_helps_and_the_default_action() -> None:
    config = KafkaConnectorError("bad option", code=TxnCode.CONFIG)
    assert not config.retry_stage and not can_retry_stage(config)
    assert config.action is ErrorAction.FATAL
    aborted = TxnError("not everywhere", code=TxnCode.EPOCH_ABORTED)
    assert aborted.retry_stage and aborted.action is ErrorAction.ABORT
    fenced = KafkaConnectorError("fenced", code=KafkaCode.PRODUCER_FENCED, action="fatal")
    assert fenced.retry_stage and fenced.action is ErrorAction.FATAL  # a new producer retries
    assert can_retry_stage(ValueError("not the kit's: assumed transient"))


def test_a_connector_raises_the_core_s_and_the_stage_s_cases_with_its_own_class() -> None:
    locked = PostgresSinkError("held", code=TxnCode.EPOCH_LOG_LOCKED)
    missing = KafkaConnectorError("no column", code=StageCode.INPUT_SCHEMA, column="value")
    assert has_code(locked, TxnCode.EPOCH_LOG_LOCKED) and not has_code(locked, TxnCode.CONFIG)
    assert missing.code in INPUT_CODES and missing.column == "value"
    assert not has_code(ValueError("x"), TxnCode.CONFIG)


@pytest.mark.parametrize(
    "codes", [TxnCode, StageCode, KafkaCode, PostgresCode, SqliteCode, LakehouseCode, AsyncCode]
)
def test_each_code_has_a_distinct_text_and_a_retry_flag(codes: type[ErrorCode]) -> None:
    texts = [c.text for c in codes]
    assert len(set(texts)) == len(texts)
    assert all(isinstance(c.retry_stage, bool) for c in codes)
    assert all(pickle.loads(pickle.dumps(c)) is c for c in codes)


def test_the_broker_s_protocol_error_survives_pickling() -> None:
    from kio.schema.errors import ErrorCode as KafkaErrorCode

    from minikafka._errors import KafkaProtocolError

    error = KafkaProtocolError(KafkaErrorCode.corrupt_message, "crc mismatch")
    back = pickle.loads(pickle.dumps(error))
    assert (back.error_code, str(back)) == (KafkaErrorCode.corrupt_message, "crc mismatch")
    assert str(KafkaProtocolError(KafkaErrorCode.invalid_config)) == "invalid_config"
