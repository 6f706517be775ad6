"""Config validation, typed errors and pickle round-trips of connectors.async_io."""

from __future__ import annotations

import asyncio
import math
import pickle
from typing import Any

import pyarrow as pa
import pytest

from connectors.async_io import (
    AsyncCode,
    AsyncConfig,
    AsyncFunction,
    AsyncIOError,
    AsyncMetrics,
    AsyncOperator,
    OnTimeout,
    RetryPolicy,
)
from connectors.async_io._errors import row_error
from connectors.async_io._metrics import LatencyHistogram
from connectors.async_io._spark import PartitionRunner
from txn import TxnCode, TxnError

SCHEMA = pa.schema([("y", pa.int64())])


async def double(row: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"y": row["x"] * 2}


class Transient(Exception):
    pass


def test_defaults_are_valid() -> None:
    cfg = AsyncConfig()
    assert cfg.ordered is True
    assert cfg.capacity == 100
    assert cfg.on_timeout is OnTimeout.FAIL
    assert cfg.retry.retry_on == ()


def test_on_timeout_accepts_its_string_value() -> None:
    assert AsyncConfig(on_timeout="drop").on_timeout is OnTimeout.DROP  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"capacity": 0}, "capacity"),
        ({"capacity": 10_001}, "capacity"),
        ({"capacity": 2.0}, "capacity"),
        ({"capacity": True}, "capacity"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": -1.0}, "timeout_s"),
        ({"timeout_s": math.inf}, "timeout_s"),
        ({"timeout_s": math.nan}, "timeout_s"),
        ({"timeout_s": "5"}, "timeout_s"),
        ({"ordered": 1}, "ordered"),
        ({"on_timeout": "explode"}, "on_timeout"),
        ({"timeout_default": {"y": 1}}, "timeout_default"),
        ({"on_timeout": "default", "timeout_default": [1]}, "timeout_default"),
        ({"retry": {"max_attempts": 3}}, "retry"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_config_raises_typed_error_naming_the_field(
    kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(AsyncIOError, match=fragment, check=lambda e: e.code is TxnCode.CONFIG):
        AsyncConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"retry_on": [Transient]}, "retry_on"),
        ({"retry_on": (asyncio.CancelledError,)}, "retry_on"),
        ({"retry_on": ("ConnectionError",)}, "retry_on"),
        ({"initial_backoff_s": 0}, "initial_backoff_s"),
        ({"initial_backoff_s": 3.0, "max_backoff_s": 1.0}, "max_backoff_s"),
        ({"multiplier": 0.5}, "multiplier"),
    ],
)
def test_bad_retry_policy_raises(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(AsyncIOError, match=fragment, check=lambda e: e.code is TxnCode.CONFIG):
        RetryPolicy(**kwargs)


def test_a_config_error_is_the_operator_s_error_with_the_config_code() -> None:
    with pytest.raises(AsyncIOError) as info:
        RetryPolicy(max_attempts=0)
    assert info.value.code is TxnCode.CONFIG and not info.value.retry_stage
    assert isinstance(info.value, TxnError)


def test_config_is_frozen() -> None:
    cfg = AsyncConfig()
    with pytest.raises(AttributeError):
        cfg.capacity = 5  # type: ignore[misc]


def test_config_pickle_round_trip() -> None:
    cfg = AsyncConfig(
        ordered=False,
        capacity=7,
        timeout_s=1.5,
        on_timeout=OnTimeout.DEFAULT,
        timeout_default={"y": -1},
        retry=RetryPolicy(max_attempts=5, retry_on=(ConnectionError, Transient)),
        batch_size=3,
    )
    assert pickle.loads(pickle.dumps(cfg)) == cfg


def test_metrics_pickle_round_trip() -> None:
    hist = LatencyHistogram.from_counts({10: 2, 500: 1}, 0.5, 80.0)
    metrics = AsyncMetrics(
        rows_in=3,
        rows_out=2,
        requests=3,
        retries=1,
        timeouts=1,
        dropped=1,
        max_in_flight=2,
        latency=hist,
    )
    assert pickle.loads(pickle.dumps(metrics)) == metrics


@pytest.mark.parametrize("code", list(AsyncCode))
def test_row_errors_pickle_round_trip(code: AsyncCode) -> None:
    err = row_error(code, 3, 1234, "boom")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is AsyncIOError and back.code is code
    assert (back.partition, back.row_index, back.detail) == (3, 1234, "boom")
    assert str(back) == f"[{code.text}] partition 3, row 1234: boom"


def test_partition_runner_pickle_round_trip() -> None:
    runner = PartitionRunner(fn=double, enrichment_schema=SCHEMA, config=AsyncConfig(capacity=3))
    back = pickle.loads(pickle.dumps(runner))
    assert back.enrichment_schema == SCHEMA
    assert back.config == runner.config
    out = list(back(iter([pa.record_batch({"x": [1, 2]})])))
    assert out[0].column("y").to_pylist() == [2, 4]


def test_sync_function_is_rejected() -> None:
    def blocking(row: dict[str, Any]) -> dict[str, Any]:
        return {"y": 1}

    with pytest.raises(AsyncIOError, match="async def", check=lambda e: e.code is TxnCode.CONFIG):
        AsyncOperator(blocking, SCHEMA)


def test_async_callable_object_and_async_function_are_accepted() -> None:
    class Caller:
        async def __call__(self, row: dict[str, Any]) -> None:
            return None

    class Rich(AsyncFunction):
        async def __call__(self, request: Any) -> None:
            return None

    AsyncOperator(Caller(), SCHEMA)
    AsyncOperator(Rich(), SCHEMA)


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ("y long", "pyarrow.Schema"),
        (pa.schema([]), "at least one"),
        (pa.schema([("y", pa.int64()), ("y", pa.string())]), "repeats"),
    ],
)
def test_bad_enrichment_schema(schema: Any, fragment: str) -> None:
    with pytest.raises(AsyncIOError, match=fragment, check=lambda e: e.code is TxnCode.CONFIG):
        AsyncOperator(double, schema)


def test_timeout_default_must_name_enrichment_columns() -> None:
    cfg = AsyncConfig(on_timeout=OnTimeout.DEFAULT, timeout_default={"nope": 1})
    with pytest.raises(AsyncIOError, match="nope", check=lambda e: e.code is TxnCode.CONFIG):
        AsyncOperator(double, SCHEMA, cfg)


def test_enrichment_column_clashing_with_input_is_rejected() -> None:
    op = AsyncOperator(double, SCHEMA)
    with pytest.raises(
        AsyncIOError, match="already exist", check=lambda e: e.code is TxnCode.CONFIG
    ):
        list(op.run([pa.record_batch({"x": [1], "y": [2]})]))
