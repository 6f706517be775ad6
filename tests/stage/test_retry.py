"""The shared retry engine: attempts, the call's window and the epoch step's budget."""

from __future__ import annotations

import time

import pytest

from connectors.stage._retry import RetryBound, retry, step_budget

NO_WAIT = RetryBound(attempts=3, wait_min_s=0.0, wait_max_s=0.0)


class Transient(Exception):
    pass


def failing(calls: list[float], times: int) -> object:
    def fn() -> str:
        calls.append(time.monotonic())
        if len(calls) <= times:
            raise Transient
        return "ok"

    return fn


def test_retries_what_is_retriable_until_it_succeeds() -> None:
    calls: list[float] = []
    assert retry(failing(calls, 2), bound=NO_WAIT, retriable=lambda e: True) == "ok"  # type: ignore[arg-type]
    assert len(calls) == 3


def test_stops_after_the_attempts_and_raises_the_last_error_unchanged() -> None:
    calls: list[float] = []
    retried: list[int] = []
    with pytest.raises(Transient):
        retry(
            failing(calls, 10),
            bound=NO_WAIT,
            retriable=lambda e: True,  # type: ignore[arg-type]
            on_retry=lambda e, n: retried.append(n),
        )
    assert len(calls) == 3 and retried == [1, 2]


def test_an_error_not_to_retry_is_raised_at_once() -> None:
    calls: list[float] = []
    with pytest.raises(Transient):
        retry(failing(calls, 10), bound=NO_WAIT, retriable=lambda e: False)  # type: ignore[arg-type]
    assert len(calls) == 1


def test_the_window_keeps_retrying_beyond_the_attempts() -> None:
    calls: list[float] = []
    bound = RetryBound(attempts=2, window_s=0.2, wait_min_s=0.0, wait_max_s=0.0)
    started = time.monotonic()
    with pytest.raises(Transient):
        retry(failing(calls, 10**6), bound=bound, retriable=lambda e: True)  # type: ignore[arg-type]
    # The window runs from before the first call: it ended no earlier than 0.2 s after that.
    assert len(calls) > 2 and time.monotonic() - started >= 0.2


def test_calls_of_one_step_share_its_budget() -> None:
    bound = RetryBound(attempts=1, window_s=60.0, wait_min_s=0.0, wait_max_s=0.0)
    first: list[float] = []
    second: list[float] = []
    started = time.monotonic()
    with step_budget(0.3):
        with pytest.raises(Transient):
            retry(failing(first, 10**6), bound=bound, retriable=lambda e: True)  # type: ignore[arg-type]
        with pytest.raises(Transient):
            retry(failing(second, 10**6), bound=bound, retriable=lambda e: True)  # type: ignore[arg-type]
        with step_budget(10.0):  # a nested budget never extends the step's
            with pytest.raises(Transient):
                retry(failing([], 10**6), bound=bound, retriable=lambda e: True)  # type: ignore[arg-type]
    assert time.monotonic() - started < 30.0  # not the calls' own 60 s windows
    assert len(second) == 1  # the budget was spent by the first call
