"""The rate-limited warning when a share of a batch's requests fail or time out."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pyarrow as pa
import pytest

from connectors.async_io import AsyncConfig, AsyncOperator, OnTimeout, RetryPolicy, _health
from connectors.async_io import _operator as operator_module

SCHEMA = pa.schema([("y", pa.int64())])
# Seconds a request of a "down" service sleeps: far beyond the timeout, never waited for.
HANG_S = 600.0
# Seconds of the requests' timeout: short, the service is down anyway.
TIMEOUT_S = 0.05


def batch(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch({"x": pa.array(range(start, start + n), pa.int64())})


class Service:
    """Answers x * 2; rows in ``down`` hang, rows in ``flaky`` fail their first attempt."""

    def __init__(self, down: set[int] | None = None, flaky: set[int] | None = None) -> None:
        self.down, self.flaky, self.failed = down or set(), flaky or set(), set()

    async def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        x = row["x"]
        if x in self.down:
            await asyncio.sleep(HANG_S)
        if x in self.flaky and x not in self.failed:
            self.failed.add(x)
            raise ConnectionError("reset by peer")
        return {"y": 2 * x}


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch) -> _health.HealthWarnings:
    fresh = _health.HealthWarnings()
    monkeypatch.setattr(operator_module, "WARNINGS", fresh)
    return fresh


def run(service: Service, cfg: AsyncConfig, *batches: pa.RecordBatch) -> list[pa.RecordBatch]:
    return list(AsyncOperator(service, SCHEMA, cfg, partition=3).run(batches))


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "connectors.async_io" and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize("policy", [OnTimeout.DROP, OnTimeout.DEFAULT])
def test_a_service_that_is_down_is_logged_whatever_the_timeout_policy(
    policy: OnTimeout, warnings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = AsyncConfig(capacity=20, timeout_s=TIMEOUT_S, on_timeout=policy)
    out = run(Service(down=set(range(10))), cfg, batch(0, 10))
    assert out[0].num_rows == (0 if policy is OnTimeout.DROP else 10)
    [message] = warned(caplog)
    assert "10 of 10 requests failed or timed out in 1 batch(es) (partition 3" in message
    assert f"on_timeout={policy.value}" in message
    dropped, defaulted = (10, 0) if policy is OnTimeout.DROP else (0, 10)
    assert f"{dropped} rows dropped, {defaulted} rows given the default" in message


def test_retries_count_as_failed_requests(warnings: Any, caplog) -> None:
    cfg = AsyncConfig(retry=RetryPolicy(retry_on=(ConnectionError,), initial_backoff_s=0.001))
    out = run(Service(flaky={1, 2}), cfg, batch(0, 20))
    assert out[0].column("y").to_pylist() == [2 * x for x in range(20)]  # all answered
    [message] = warned(caplog)
    assert "2 of 20 requests" in message and "2 needed retries" in message


def test_a_healthy_or_barely_troubled_batch_is_not_logged(warnings: Any, caplog) -> None:
    cfg = AsyncConfig(capacity=50, timeout_s=TIMEOUT_S, on_timeout=OnTimeout.DROP)
    run(Service(), cfg, batch(0, 40))
    run(Service(down={5}), cfg, batch(0, 40))  # 1 of 40 is below UNHEALTHY_SHARE
    assert warned(caplog) == []


def test_warnings_are_rate_limited_and_sum_what_they_held_back(
    warnings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = AsyncConfig(capacity=20, timeout_s=TIMEOUT_S, on_timeout=OnTimeout.DROP)
    down = Service(down=set(range(100)))
    run(down, cfg, batch(0, 4), batch(4, 4), batch(8, 4))
    assert len(warned(caplog)) == 1  # three unhealthy batches, one line
    warnings.interval_s = 0.0  # the interval has passed
    run(down, cfg, batch(12, 4))
    second = warned(caplog)[1]
    assert "12 of 12 requests failed or timed out in 3 batch(es)" in second  # 2 held + 1
