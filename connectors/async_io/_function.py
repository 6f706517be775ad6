"""The user-function side: lifecycle base class, validation, and one request's call."""

from __future__ import annotations

import abc
import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from connectors.async_io._config import RetryPolicy
from connectors.async_io._errors import AsyncIOError
from txn import TxnCode

Enrichment = Mapping[str, Any] | None
AsyncFn = Callable[[Any], Awaitable[Any]]


class AsyncFunction(abc.ABC):
    """Base class for user functions that hold resources (Flink's RichAsyncFunction).

    Lifecycle, once per partition (per ``AsyncOperator.run``):
        1. the object is unpickled in the Python worker (so create clients in ``open``,
           not in ``__init__``: sockets and event-loop-bound objects do not pickle);
        2. ``await open()`` runs inside the operator's event loop before any request;
        3. ``await __call__(request)`` runs per request, up to ``capacity`` at once;
        4. ``await close()`` runs once after the last request finished or was
           cancelled, also when the run fails.

    A plain ``async def`` function is accepted wherever an AsyncFunction is.
    """

    async def open(self) -> None:  # noqa: B027 - optional hook, empty on purpose
        """Create clients and pools; runs in the operator's event loop."""

    @abc.abstractmethod
    async def __call__(self, request: Any) -> Any:
        """Enrich one request (a row dict, or a list of row dicts in batch mode)."""

    async def close(self) -> None:  # noqa: B027 - optional hook, empty on purpose
        """Release what ``open`` created."""


def check_async_callable(fn: object) -> AsyncFn:
    """Return ``fn`` if awaiting its call is possible, else raise TxnCode.CONFIG."""
    if isinstance(fn, AsyncFunction):
        return fn
    if callable(fn) and (
        inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(fn.__call__)
    ):
        return fn
    msg = (
        f"fn must be an 'async def' function or an AsyncFunction, got {fn!r}; "
        "wrap blocking code with asyncio.to_thread inside an async function"
    )
    raise AsyncIOError(msg, code=TxnCode.CONFIG)


class UserFailure(Exception):
    """The user function raised ``error`` (non-retriable, or on its last attempt)."""

    def __init__(self, error: Exception, attempts: int) -> None:
        super().__init__(error, attempts)
        self.error = error
        self.attempts = attempts


async def call_with_retries(
    fn: AsyncFn, request: Any, policy: RetryPolicy, on_retry: Callable[[], None]
) -> Any:
    """Call ``fn(request)`` under ``policy``.

    Contract:
        1. Exceptions listed in ``policy.retry_on`` are retried with exponential backoff,
           at most ``policy.max_attempts`` calls in all; ``on_retry`` runs before each
           backoff sleep.
        2. The last exception (or any non-retriable one) is raised as UserFailure, so a
           caller can tell it apart from its own ``asyncio.TimeoutError``.
        3. Cancellation propagates unchanged and is never retried.

    Protocol (the first attempt skips tenacity, which costs more than a fast request):
        1. Call ``fn`` once; return its result, or raise UserFailure for an exception that
           is not retriable or when ``max_attempts`` is 1.
        2. Otherwise sleep ``initial_backoff_s`` and let tenacity run attempts 2..n with
           backoff ``initial_backoff_s * multiplier ** k`` (capped) before attempt k + 2.
    """
    try:
        return await fn(request)
    except Exception as exc:  # every user error is reported, typed, upstream
        if policy.max_attempts == 1 or not isinstance(exc, policy.retry_on):
            raise UserFailure(exc, 1) from exc
    on_retry()
    await asyncio.sleep(policy.initial_backoff_s)
    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.max_attempts - 1),
        wait=wait_exponential(
            multiplier=policy.initial_backoff_s * policy.multiplier,
            exp_base=policy.multiplier,
            max=policy.max_backoff_s,
        ),
        retry=retry_if_exception_type(policy.retry_on),
        before_sleep=_callback(on_retry),
        reraise=True,
    )
    attempts = 1
    try:
        async for attempt in retrying:
            with attempt:
                attempts = attempt.retry_state.attempt_number + 1
                return await fn(request)
    except Exception as exc:  # the last attempt's error, or a non-retriable one
        raise UserFailure(exc, attempts) from exc
    msg = "unreachable: tenacity either returns or raises"  # pragma: no cover
    raise AssertionError(msg)  # pragma: no cover


def _callback(on_retry: Callable[[], None]) -> Callable[[RetryCallState], None]:
    def before_sleep(_state: RetryCallState) -> None:
        on_retry()

    return before_sleep


def validate_result(
    result: object, n_rows: int, batch_mode: bool, names: frozenset[str]
) -> list[Enrichment] | str:
    """Turn the user function's result into one enrichment per row.

    Returns the list, or a string saying what is wrong (the caller adds the position).
    Row mode: a mapping (or None for all-null). Batch mode: a sequence of ``n_rows`` such.
    """
    if not batch_mode:
        problem = _check_enrichment(result, names)
        return problem if problem else [result]  # type: ignore[list-item]
    if isinstance(result, (str, bytes, Mapping)) or not isinstance(result, Sequence):
        return f"batch function must return a list of mappings, got {type(result).__name__}"
    if len(result) != n_rows:
        return f"batch function returned {len(result)} results for {n_rows} rows"
    for item in result:
        problem = _check_enrichment(item, names)
        if problem:
            return problem
    return list(result)


def _check_enrichment(value: object, names: frozenset[str]) -> str:
    if value is None:
        return ""
    if not isinstance(value, Mapping):
        return (
            f"function must return a mapping of enrichment columns (or None), "
            f"got {type(value).__name__}"
        )
    unknown = [k for k in value if k not in names]
    if unknown:
        return f"result has columns {unknown!r} not in the enrichment schema {sorted(names)!r}"
    return ""
