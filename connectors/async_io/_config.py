"""Frozen, picklable configuration of the async I/O operator, validated at construction."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from connectors.async_io._errors import AsyncIOError
from txn import TxnCode

# Requests in flight per partition when the caller does not choose: enough to hide a
# few tens of milliseconds of service latency without flooding a small service.
DEFAULT_CAPACITY = 100
# Seconds one request (all attempts and backoff included) may take by default; generous
# because a slow answer is usually better than failing the whole micro-batch.
DEFAULT_TIMEOUT_S = 30.0
# Seconds of the first retry backoff; short, since most transient faults clear quickly.
DEFAULT_INITIAL_BACKOFF_S = 0.05
# Seconds: upper bound of one retry backoff, so backoff never dominates the timeout.
DEFAULT_MAX_BACKOFF_S = 2.0
# Hard upper bound on capacity: beyond this the per-partition task set itself becomes
# the bottleneck and the service is almost certainly being overloaded by mistake.
MAX_CAPACITY = 10_000


class OnTimeout(str, enum.Enum):
    """What happens to a row whose request times out.

    FAIL: raise :class:`AsyncCode.REQUEST_TIMEOUT` and fail the batch (Spark then retries the task).
    DEFAULT: emit the row with ``AsyncConfig.timeout_default`` as its enrichment.
    DROP: leave the row out of the output and count it in ``AsyncMetrics.dropped``.
    """

    FAIL = "fail"
    DEFAULT = "default"
    DROP = "drop"


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise AsyncIOError(message, code=TxnCode.CONFIG)


def _positive_finite(value: object, name: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        msg = f"{name} must be a positive finite number, got {value!r}"
        raise AsyncIOError(msg, code=TxnCode.CONFIG)


def _positive_int(value: object, name: str, upper: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
        msg = f"{name} must be an int in [1, {upper}], got {value!r}"
        raise AsyncIOError(msg, code=TxnCode.CONFIG)


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Bounded exponential-backoff retries for exceptions the user marks retriable.

    Contract:
        1. Only exceptions that are instances of a type in ``retry_on`` are retried; any
           other exception fails the request at once.
        2. A request makes at most ``max_attempts`` calls of the user function.
        3. Before retry ``k`` (1-based) it sleeps
           ``min(initial_backoff_s * multiplier ** (k - 1), max_backoff_s)`` seconds.
        4. The operator timeout bounds all attempts and sleeps together; a retry never
           extends it.

    The default policy retries nothing (``retry_on`` is empty).
    """

    max_attempts: int = 3
    retry_on: tuple[type[Exception], ...] = ()
    initial_backoff_s: float = DEFAULT_INITIAL_BACKOFF_S
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        _positive_int(self.max_attempts, "RetryPolicy.max_attempts", 100)
        _check(
            isinstance(self.retry_on, tuple),
            f"RetryPolicy.retry_on must be a tuple of exception types, got {self.retry_on!r}",
        )
        for exc_type in self.retry_on:
            _check(
                isinstance(exc_type, type) and issubclass(exc_type, Exception),
                f"RetryPolicy.retry_on may hold only Exception subclasses, got {exc_type!r}",
            )
        _positive_finite(self.initial_backoff_s, "RetryPolicy.initial_backoff_s")
        _positive_finite(self.max_backoff_s, "RetryPolicy.max_backoff_s")
        _check(
            self.max_backoff_s >= self.initial_backoff_s,
            "RetryPolicy.max_backoff_s must be >= initial_backoff_s",
        )
        _positive_finite(self.multiplier, "RetryPolicy.multiplier")
        _check(
            self.multiplier >= 1.0, f"RetryPolicy.multiplier must be >= 1, got {self.multiplier!r}"
        )


@dataclass(frozen=True, kw_only=True)
class AsyncConfig:
    """How the operator calls the user function.

    Attributes:
        ordered: True: results leave in input order; False: in completion order. Either
            way no result crosses the end of its input Arrow batch (the fence).
        capacity: the most requests in flight at once per partition.
        timeout_s: seconds one request may take, all retries and backoff included.
        on_timeout: outcome of a timed-out request (see :class:`OnTimeout`).
        timeout_default: enrichment values emitted for a timed-out row when
            ``on_timeout`` is ``DEFAULT``; missing columns are null. Only allowed then.
        retry: the retry policy.
        batch_size: None: the function gets one row (a dict) per request. An int n: the
            function gets a list of up to n row dicts (never crossing an input batch) and
            returns a list of enrichments of the same length.

    """

    ordered: bool = True
    capacity: int = DEFAULT_CAPACITY
    timeout_s: float = DEFAULT_TIMEOUT_S
    on_timeout: OnTimeout = OnTimeout.FAIL
    timeout_default: Mapping[str, Any] | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    batch_size: int | None = None

    def __post_init__(self) -> None:
        _check(isinstance(self.ordered, bool), f"ordered must be a bool, got {self.ordered!r}")
        _positive_int(self.capacity, "capacity", MAX_CAPACITY)
        _positive_finite(self.timeout_s, "timeout_s")
        try:
            object.__setattr__(self, "on_timeout", OnTimeout(self.on_timeout))
        except ValueError:
            choices = ", ".join(repr(o.value) for o in OnTimeout)
            msg = f"on_timeout must be one of {choices}, got {self.on_timeout!r}"
            raise AsyncIOError(msg, code=TxnCode.CONFIG) from None
        if self.timeout_default is not None:
            _check(
                self.on_timeout is OnTimeout.DEFAULT,
                "timeout_default is only used with on_timeout='default'; remove it or "
                "set on_timeout='default'",
            )
            _check(
                isinstance(self.timeout_default, Mapping),
                f"timeout_default must be a mapping column -> value, "
                f"got {type(self.timeout_default).__name__}",
            )
        _check(
            isinstance(self.retry, RetryPolicy),
            f"retry must be a RetryPolicy, got {type(self.retry).__name__}",
        )
        if self.batch_size is not None:
            _positive_int(self.batch_size, "batch_size", 1_000_000)
