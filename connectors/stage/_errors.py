"""Errors of the generic Spark write stage, shared by every connector built on it.

Each class says whether running the write stage again can help
(``retry_stage``, see :class:`txn.TxnError`). Connectors derive their own errors from
these (the Kafka sink's ``InputSchemaError`` is both a ``connectors.stage.InputSchemaError``
and a ``KafkaSinkError``), so a caller can catch either family::

    StageError (txn.TxnError)
    +-- InputError (ValueError)             the DataFrame cannot be written; names the column
    |   +-- InputSchemaError                a column is missing or mistyped (driver, nothing written)
    |   +-- RecordError                     one record cannot be written (task; epoch aborted)
    |       +-- BadRecordThresholdError     more bad records than max_bad_fraction allows
    +-- InsufficientSlotsError (ConfigError) aligned mode: the epoch's tasks do not fit at once
    +-- StagePartitioningError              Spark ran another number of write tasks than planned
    +-- QueryMismatchError                  the epoch log belongs to another query (checkpoint)
    +-- CheckpointError (ConfigError)       checkpoint_location names no checkpoint of this query
    +-- ResumeError                         a query cannot resume from the sink's output
    |   +-- ResumeInputMismatchError        it reads other topics/partitions/offsets (named)
    |   +-- NotKafkaInputError              the committed input was not (only) Kafka
    +-- SinkStoppedError                    a graceful stop was requested; the batch was not written
    +-- SinkInUseError (EpochLogLockedError) another sink object of this process, whose query runs, holds the log
    +-- SparkConnectError (ConfigError)     what Spark Connect cannot give (binding, slot count)
    +-- VoteChannelError                    the driver vote channel failed; the task aborts
        +-- VoteTimeoutError                not every task voted in time
        +-- VoteRejectedError               the vote server refused a vote
"""

from __future__ import annotations

from typing import Any

from txn import ConfigError, EpochLogLockedError, TxnError


class StageError(TxnError):
    """Base class of the errors raised by :mod:`connectors.stage`."""


class InputError(StageError, ValueError):
    """The DataFrame handed to a sink cannot be written; the message names the column."""

    retry_stage = False

    def __init__(self, message: str, *, column: str | None = None) -> None:
        super().__init__(message)
        self.column = column

    def __reduce__(self) -> tuple[object, ...]:
        # Travels from the write task to the driver pickled; keep the column.
        return (rebuild_error, (type(self), str(self), {"column": self.column}))


class InputSchemaError(InputError):
    """A column is missing or has a type the sink cannot write (detected on the driver)."""


class RecordError(InputError):
    """One record cannot be written (null where a value is required, unknown op, ...)."""


class BadRecordThresholdError(RecordError):
    """A write partition had more bad records than ``max_bad_fraction`` allows (epoch aborted).

    The circuit breaker of ``on_bad_record="dead-letter"`` / ``"skip"``: the classification
    is deterministic, so the replay trips it again until the input or the limit changes.
    """


class InsufficientSlotsError(StageError, ConfigError):
    """Aligned mode needs every write task of an epoch running at once, and they do not fit."""


class StagePartitioningError(StageError):
    """Spark ran another number of write tasks than the plan's parallelism.

    Adaptive query execution can coalesce the routing shuffle; the epoch stays in doubt
    and is retried.
    """


class VoteChannelError(StageError):
    """The driver vote channel failed (unreachable, broken round); the task aborts."""


class VoteTimeoutError(VoteChannelError):
    """Not every write task voted within ``txn.GATHER_TIMEOUT_S``; the round is broken."""


class VoteRejectedError(VoteChannelError):
    """The vote server refused a vote (wrong token, stale stage run, conflicting vote)."""


def rebuild_error(cls: type[Exception], message: str, kwargs: dict[str, Any]) -> Exception:
    """Unpickle an error whose constructor takes keyword-only arguments.

    A connector's error with keyword-only fields crosses the process boundary (a task to
    the driver) by ``__reduce__`` returning ``(rebuild_error, (cls, message, kwargs))``.
    """
    return cls(message, **kwargs)


class QueryMismatchError(StageError):
    """The sink's epoch log belongs to another streaming query (another checkpoint).

    Raised before anything is planned or written. The message names both queries and the
    two ways to go on: a new ``sink_id``, or an explicit start-over (``start_over=True``,
    or ``eos reset``) that binds the log to the new query above its last epoch.
    """

    retry_stage = False


class CheckpointError(StageError, ConfigError):
    """``checkpoint_location`` does not identify the query writing the sink.

    Its ``metadata`` file is missing or unreadable (a wrong path, or the query has not
    started), or, on a classic session, it names another query than the one running the
    batch. Raised at the first write, before anything is logged or written.
    """

    retry_stage = False


class SinkStoppedError(StageError):
    """The sink was asked to stop; the batch was not written (Spark replays it on restart)."""

    retry_stage = False


class SinkInUseError(StageError, EpochLogLockedError):
    """Another sink object of this process holds the sink's epoch log, and its query runs.

    Raised at the first write of the new object, before anything is logged or written.
    The message names the running query and what to do: stop it first (``query.stop()``
    or ``sink.stop_gracefully(query)``), or give the new query another ``sink_id``.
    """

    retry_stage = False


class SparkConnectError(StageError, ConfigError):
    """Spark Connect does not give what the sink needs; the message says what to pass.

    Raised at the first write, before anything is logged: a ``foreachBatch`` of a
    streaming query under Connect without ``checkpoint_location`` (the query binding
    needs it there), and a sink without ``parallelism`` when the server's configuration
    does not tell its task slots (``connectors.stage._slots``).
    """

    retry_stage = False


class ResumeError(StageError):
    """A new query cannot resume from the sink's committed output (``resume="from-output"``).

    An epoch in doubt that cannot be settled is :class:`txn.EpochUnresolvedError`.
    """

    retry_stage = False


class ResumeInputMismatchError(ResumeError):
    """The new query reads other topics, partitions or offsets than the output ends at."""


class NotKafkaInputError(ResumeError):
    """The sink's committed epochs did not record Kafka input offsets (not, or not only, Kafka)."""
