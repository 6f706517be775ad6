"""The error of the async I/O enrichment operator.

One class, :class:`AsyncIOError` (a :class:`txn.TxnError`), with a code per case: a bad
configuration, enrichment schema or user function is ``txn.TxnCode.CONFIG`` (raised at
construction, before any request is sent); the cases of one request are an
:class:`AsyncCode`. An error that names a row carries its position as
``(partition, row_index)``: ``partition`` is the Spark partition id (``0`` for the
pure-Python operator unless the caller says otherwise) and ``row_index`` is the 0-based
index of the row among all input rows the operator has read in that partition (across
Arrow batches); ``detail`` says what went wrong, in words. Every attribute survives
pickling, so the errors cross process boundaries.
"""

from __future__ import annotations

from typing import ClassVar

from txn import ErrorAction, ErrorCode, TxnError


class AsyncCode(ErrorCode):
    """The cases of one request of the operator."""

    ERROR = ("async-io", True)
    # The user function raised, not retriable or out of retries; the cause is chained
    # (in-process) and summarised in ``detail`` (which survives pickling).
    REQUEST_FAILED = ("request-failed", True)
    # A request did not finish within the configured timeout and ``on_timeout`` is FAIL.
    REQUEST_TIMEOUT = ("request-timeout", True)
    # The user function returned a value that does not fit the enrichment schema.
    ENRICHMENT_RESULT = ("enrichment-result", False)


class AsyncIOError(TxnError):
    """The error of :mod:`connectors.async_io`; see the module docstring for the fields."""

    default_code: ClassVar[ErrorCode] = AsyncCode.ERROR

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        action: ErrorAction | None = None,
        partition: int | None = None,
        row_index: int | None = None,
        detail: str = "",
    ) -> None:
        super().__init__(message, code=code, action=action, partition=partition)
        self.row_index = row_index
        self.detail = detail


def row_error(code: AsyncCode, partition: int, row_index: int, detail: str) -> AsyncIOError:
    """Return the error of the request of row ``(partition, row_index)``."""
    message = f"partition {partition}, row {row_index}: {detail}"
    return AsyncIOError(message, code=code, partition=partition, row_index=row_index, detail=detail)
