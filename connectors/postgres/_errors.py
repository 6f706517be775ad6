"""The error of the PostgreSQL sink.

One class, :class:`PostgresSinkError` (a :class:`txn.TxnError`), with a code per case: a
:class:`PostgresCode` for what is PostgreSQL's own, and the core's or the stage's code for
a case they define (a bad option ``txn.TxnCode.CONFIG``, a missing column
``connectors.stage.StageCode.INPUT_SCHEMA``, one value that cannot be written
``StageCode.RECORD``, a lost prepared transaction ``txn.TxnCode.PREPARED_WORK_LOST``, the
epoch log taken over ``txn.TxnCode.EPOCH_LOG_LOCKED``). ``sqlstate`` is the server's
code when it refused a statement, ``action`` its classification; ``needed`` the DDL a
schema evolution would need. Errors travel from the write tasks to the driver pickled;
every attribute survives. The PostgreSQL cases::

    TWO_PHASE_UNAVAILABLE   two-phase forced, the server has 0 prepared-transaction slots
    TABLE_NOT_FOUND         the target table does not exist
    SCHEMA_EVOLUTION        evolving the table needs a change the sink never makes
    VALUE_TOO_LARGE         a value exceeds its column's limit
    WRITE                   the server refused a statement (``action`` says what was done)
    CONSTRAINT_VIOLATION    NOT NULL / unique / check / FK
    INVALID_VALUE           the server rejected a value (22xxx)
    FATAL                   authentication, privileges, server I/O
    PARTITION_CONFLICT      another instance committed this epoch
    TABLE_CHANGED           the table changed while the sink evolved it
    EVOLUTION_BLOCKED       prepared work of the sink in doubt holds the table
    LINGERING_PREPARED      idempotency-table mode found prepared transactions of a two-phase run
"""

from __future__ import annotations

from typing import ClassVar

from txn import ErrorAction, ErrorCode, TxnError


class PostgresCode(ErrorCode):
    """The cases of the PostgreSQL sink (see the module docstring)."""

    ERROR = ("postgres", True)
    TWO_PHASE_UNAVAILABLE = ("two-phase-unavailable", False)
    TABLE_NOT_FOUND = ("table-not-found", False)
    SCHEMA_EVOLUTION = ("schema-evolution", False)
    VALUE_TOO_LARGE = ("value-too-large", False)
    WRITE = ("write", True)
    CONSTRAINT_VIOLATION = ("constraint-violation", False)
    INVALID_VALUE = ("invalid-value", False)
    FATAL = ("fatal", False)
    PARTITION_CONFLICT = ("partition-conflict", True)
    TABLE_CHANGED = ("table-changed", False)
    EVOLUTION_BLOCKED = ("evolution-blocked", False)
    LINGERING_PREPARED = ("lingering-prepared", False)


# The cases of a statement the server refused (``sqlstate`` and ``action`` set).
WRITE_CODES = frozenset(
    {
        PostgresCode.WRITE,
        PostgresCode.CONSTRAINT_VIOLATION,
        PostgresCode.INVALID_VALUE,
        PostgresCode.FATAL,
    }
)


class PostgresSinkError(TxnError):
    """The error of :mod:`connectors.postgres`; see the module docstring for the fields."""

    default_code: ClassVar[ErrorCode] = PostgresCode.ERROR

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        action: ErrorAction | None = None,
        column: str | None = None,
        partition: int | None = None,
        sqlstate: str | None = None,
        needed: str = "",
    ) -> None:
        super().__init__(message, code=code, action=action, column=column, partition=partition)
        self.sqlstate = sqlstate
        self.needed = needed
