"""Exception hierarchy of the PostgreSQL sink.

Every error names what went wrong and what to do about it. Errors of the two-phase-commit
protocol itself come from :mod:`txn` (for example ``txn.NonDeterministicReplayError``);
the ones here are specific to PostgreSQL. The tree::

    PostgresSinkError (a txn.TxnError)
    +-- PostgresSinkConfigError (txn.ConfigError)              a bad option; fix the value named
    |   +-- PreparedTransactionsUnavailableError               two-phase forced, server has 0 slots
    +-- PostgresInputError (connectors.stage.InputError)       the input cannot be written
    |   +-- PostgresTableNotFoundError                         the target table does not exist
    |   +-- PostgresInputSchemaError (stage.InputSchemaError)  missing column, type mismatch, no key
    |   |   +-- SchemaEvolutionError                       evolving the table needs a change the sink never makes
    |   +-- PostgresRecordError (stage.RecordError)            one value cannot be written
    |       +-- ValueTooLargeError                             a value exceeds its column's limit
    +-- PostgresWriteError                                     the server refused a statement
    |   +-- ConstraintViolationError                           NOT NULL / unique / check / FK
    |   +-- InvalidValueError                                  the server rejected a value (22xxx)
    |   +-- PostgresFatalError                                 authentication, privileges, server I/O
    +-- PostgresPartitionConflictError                         another instance committed this epoch
    +-- TableChangedError                                      the table changed while the sink evolved it
    +-- EvolutionBlockedError                                  prepared work of the sink in doubt holds the table
    +-- PreparedTransactionLostError (txn.PreparedWorkLostError)  decided commit, work gone
    +-- PostgresEpochLogFencedError (txn.EpochLogLockedError)  another coordinator owns the log

Each class says whether re-running the write stage can help (``retry_stage``, see
:class:`txn.TxnError`): not for bad input, rejected values, violated constraints, fatal
server errors or a lost prepared transaction. Errors travel from the write tasks to the
driver pickled; the keyword attributes survive.
"""

from __future__ import annotations

from connectors.stage import InputError, InputSchemaError, RecordError
from connectors.stage._errors import rebuild_error
from txn import ConfigError, EpochLogLockedError, ErrorAction, PreparedWorkLostError, TxnError


class PostgresSinkError(TxnError):
    """Base class of every error raised by :mod:`connectors.postgres`."""


class PostgresSinkConfigError(PostgresSinkError, ConfigError):
    """A sink option is invalid (raised at construction, before any network I/O)."""


class PreparedTransactionsUnavailableError(PostgresSinkConfigError):
    """``commit_protocol='two-phase'`` was asked for, but the server allows no prepared transaction."""


class PostgresInputError(PostgresSinkError, InputError):
    """The rows handed to the sink cannot be written; ``column`` names the culprit if known."""


class PostgresTableNotFoundError(PostgresInputError):
    """The target table (or its schema) does not exist."""


class PostgresInputSchemaError(PostgresInputError, InputSchemaError):
    """A column is missing, has a type the table column cannot take, or no key is known."""


class SchemaEvolutionError(PostgresInputSchemaError):
    """``evolve_schema=True`` met a difference the sink never resolves: it only adds columns.

    A column whose type would have to change (the input is wider than the column), or a
    NOT NULL column without default that the input no longer has. ``column`` names it,
    ``needed`` is the statement a person could run (after checking it is what they want).
    Raised when the input is checked: nothing was logged or written.
    """

    def __init__(self, message: str, *, column: str | None = None, needed: str = "") -> None:
        super().__init__(message, column=column)
        self.needed = needed

    def __reduce__(self) -> tuple[object, ...]:
        return (
            rebuild_error,
            (type(self), str(self), {"column": self.column, "needed": self.needed}),
        )


class PostgresRecordError(PostgresInputError, RecordError):
    """A value of the input cannot be written (a null key, an unknown changelog op, ...)."""


class ValueTooLargeError(PostgresRecordError):
    """A value exceeds the limit of its column (for example a varchar(n) length)."""


class PostgresWriteError(PostgresSinkError):
    """The server refused a statement; ``action`` is its classification, ``sqlstate`` its code."""

    def __init__(
        self,
        message: str,
        *,
        action: ErrorAction,
        sqlstate: str | None = None,
        column: str | None = None,
    ) -> None:
        super().__init__(message)
        self.action = ErrorAction(action)
        self.sqlstate = sqlstate
        self.column = column

    def __reduce__(self) -> tuple[object, ...]:
        kwargs = {"action": self.action, "sqlstate": self.sqlstate, "column": self.column}
        return (rebuild_error, (type(self), str(self), kwargs))


class ConstraintViolationError(PostgresWriteError):
    """A row violates a constraint of the table (class 23: NOT NULL, unique, check, FK)."""

    retry_stage = False


class InvalidValueError(PostgresWriteError):
    """The server rejected a value (class 22: out of range, too long, bad encoding, ...)."""

    retry_stage = False


class PostgresFatalError(PostgresWriteError):
    """Retrying cannot help: authentication, a missing database, privileges, server I/O."""

    retry_stage = False


class PostgresPartitionConflictError(PostgresSinkError):
    """The idempotency marker shows another instance committed this partition's epoch."""


class TableChangedError(PostgresSinkError):
    """The table changed between the input check and the sink's own DDL (someone else's DDL).

    Raised on the driver before the epoch's plan is logged: nothing was written; the batch
    is checked again against the table as it is now when the query runs it again.
    """

    retry_stage = False


class EvolutionBlockedError(PostgresSinkError):
    """The table must gain columns, but prepared transactions of the sink hold locks on it.

    Only after a failed epoch whose prepared work the same sink object has not finished
    yet (a new sink object recovers before its first DDL). Raised on the driver at once,
    instead of waiting for the locks: nothing was changed, logged or written.
    """

    retry_stage = False


class PreparedTransactionLostError(PostgresSinkError, PreparedWorkLostError):
    """A commit decision was logged but neither the prepared transaction nor its marker exists.

    The coordinator keeps the decision and the replay redoes the partition (see
    :class:`txn.PreparedWorkLostError`).
    """

    retry_stage = False


class PostgresEpochLogFencedError(PostgresSinkError, EpochLogLockedError):
    """Another coordinator owns (or took over) the sink's epoch log table; stop this one."""
