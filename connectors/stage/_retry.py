"""The one retry engine of the connectors: bounded retries, one time budget per epoch step.

Each connector classifies its engine's errors (``RETRY`` / ``ABORT`` / ``FATAL``, see
:class:`txn.ErrorAction`) and asks :func:`retry` to repeat a call while the error is
one to retry. How long is set by a :class:`RetryBound` (at least ``attempts`` attempts,
and for ``window_s`` seconds at least), and inside :func:`step_budget` capped by the one
deadline of the epoch step: every retried call of the step shares it, so a step of
several calls that each wait out a broker restart still ends within its budget. After the bound the
last error is raised as it is; the connector turns it into its typed error.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import tenacity

T = TypeVar("T")

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "connectors_retry_deadline", default=None
)


@dataclass(frozen=True, kw_only=True)
class RetryBound:
    """How long one call is retried: ``attempts`` at least, and ``window_s`` seconds at least.

    ``wait_min_s`` / ``wait_max_s``: the exponential back-off between attempts.
    """

    attempts: int
    window_s: float = 0.0
    wait_min_s: float = 0.2
    wait_max_s: float = 5.0


@contextlib.contextmanager
def step_budget(seconds: float) -> Iterator[None]:
    """Let every call retried inside share one window of ``seconds`` (one epoch step).

    A nested budget never extends the enclosing one.
    """
    deadline = time.monotonic() + seconds
    outer = _deadline.get()
    token = _deadline.set(deadline if outer is None else min(outer, deadline))
    try:
        yield
    finally:
        _deadline.reset(token)


def _stop(bound: RetryBound) -> Callable[[tenacity.RetryCallState], bool]:
    """At least ``attempts`` attempts and ``window_s`` seconds; never past the step's deadline."""
    deadline = _deadline.get()

    def stop(state: tenacity.RetryCallState) -> bool:
        if deadline is not None and time.monotonic() >= deadline:
            return True  # the step's budget is spent
        if state.attempt_number < bound.attempts:
            return False
        return (state.seconds_since_start or 0.0) >= bound.window_s

    return stop


def retry(
    fn: Callable[[], T],
    *,
    bound: RetryBound,
    retriable: Callable[[BaseException], bool],
    on_retry: Callable[[BaseException, int], None] | None = None,
) -> T:
    """Run ``fn``, again while it fails with an error ``retriable`` accepts, within the bound.

    ``on_retry(error, attempt)`` is called before each wait. The last error (or any error
    ``retriable`` refuses) is raised unchanged.
    """

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        if on_retry is not None and exc is not None:
            on_retry(exc, state.attempt_number)

    retrying = tenacity.Retrying(
        stop=_stop(bound),
        wait=tenacity.wait_exponential(min=bound.wait_min_s, max=bound.wait_max_s),
        retry=tenacity.retry_if_exception(retriable),
        before_sleep=before_sleep,
        reraise=True,
    )
    return retrying(fn)
