"""Exception hierarchy of the async I/O enrichment operator.

Every error that names a row carries its position as ``(partition, row_index)``:
``partition`` is the Spark partition id (``0`` for the pure-Python operator unless the
caller says otherwise) and ``row_index`` is the 0-based index of the row among all input
rows the operator has read in that partition (across Arrow batches).

All exceptions pickle round-trip with their attributes, so they survive a trip between
processes.
"""

from __future__ import annotations


class AsyncIOError(Exception):
    """Base class of every error raised by ``connectors.async_io``."""


class AsyncConfigError(AsyncIOError, ValueError):
    """A configuration value, the enrichment schema, or the user function is invalid.

    Raised at construction time, before any request is sent.
    """


class RowError(AsyncIOError):
    """An error tied to one request; names the position of its (first) row.

    Attributes:
        partition: the partition the row belongs to.
        row_index: 0-based index of the row within its partition.
        detail: what went wrong, in words.

    """

    def __init__(self, partition: int, row_index: int, detail: str) -> None:
        super().__init__(f"partition {partition}, row {row_index}: {detail}")
        self.partition = partition
        self.row_index = row_index
        self.detail = detail

    def __reduce__(self) -> tuple[type[RowError], tuple[int, int, str]]:
        return (type(self), (self.partition, self.row_index, self.detail))


class RequestFailedError(RowError):
    """The user function raised, and the exception was not retriable or retries ran out.

    The original exception is chained as ``__cause__`` (in-process) and summarised in
    ``detail`` (which survives pickling).
    """


class RequestTimeoutError(RowError):
    """A request did not finish within the configured timeout and ``on_timeout`` is ``FAIL``."""


class EnrichmentResultError(RowError):
    """The user function returned a value that does not fit the enrichment schema."""
