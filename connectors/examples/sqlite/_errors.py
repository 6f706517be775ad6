"""Errors of the SQLite example sink and the one classifier of ``sqlite3`` errors.

The tree (each class says whether re-running the write stage can help, ``retry_stage``)::

    SqliteSinkError (a txn.TxnError)
    +-- SqliteConfigError (txn.ConfigError)          a bad option; fix the value named
    |   +-- AlignedModeError                         aligned exactly-once: deadlocks on SQLite
    +-- SqliteTableNotFoundError (connectors.stage.InputError)  no database file or no table
    +-- SqliteWriteError                             SQLite refused a call (busy, locked, ...)
    |   +-- SqliteRejectedError                      a re-run cannot help (data, file)
    +-- SqlitePartitionConflictError                 another instance committed the epoch
"""

from __future__ import annotations

import sqlite3

from connectors.stage import InputError, rebuild_error
from txn import ConfigError, ErrorAction, TxnError


class SqliteSinkError(TxnError):
    """Base class of the errors of :mod:`connectors.examples.sqlite`."""


class SqliteConfigError(SqliteSinkError, ConfigError):
    """A sink option is invalid (raised at construction, before any I/O)."""


class AlignedModeError(SqliteConfigError):
    """Aligned exactly-once was asked for: SQLite's database-wide write lock deadlocks it."""


class SqliteTableNotFoundError(SqliteSinkError, InputError):
    """The database file or the target table does not exist."""


class SqliteWriteError(SqliteSinkError):
    """SQLite refused a call; ``action`` is its classification, ``code`` SQLite's result code."""

    def __init__(self, message: str, *, action: ErrorAction, code: int | None = None) -> None:
        super().__init__(message)
        self.action = ErrorAction(action)
        self.code = code

    def __reduce__(self) -> tuple[object, ...]:  # travels from the write task pickled
        return (rebuild_error, (type(self), str(self), {"action": self.action, "code": self.code}))


class SqliteRejectedError(SqliteWriteError):
    """A re-run cannot help: a constraint, a datatype mismatch, a read-only, full or bad file."""

    retry_stage = False


class SqlitePartitionConflictError(SqliteSinkError):
    """Another instance of the write partition committed this epoch first (a task retry)."""


# --8<-- [start:classify]
# SQLite primary result codes (https://sqlite.org/rescode.html).
_RETRY_CODES = frozenset({5, 6})  # BUSY, LOCKED
# PERM, READONLY, IOERR, CORRUPT, FULL, CANTOPEN, NOTADB
_FATAL_CODES = frozenset({3, 8, 10, 11, 13, 14, 26})
_DATA_CODES = frozenset({18, 19, 20, 25})  # TOOBIG CONSTRAINT MISMATCH RANGE


def classify(exc: sqlite3.Error) -> ErrorAction:
    """Map a ``sqlite3`` error to an action by its result code, never by its message.

    Python < 3.11 carries no code: an ``IntegrityError`` is then a data error (ABORT), any
    other error ABORT too (the epoch is retried; nothing is retried blindly).
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return ErrorAction.ABORT
    if code & 0xFF in _RETRY_CODES:
        return ErrorAction.RETRY
    return ErrorAction.FATAL if code & 0xFF in _FATAL_CODES else ErrorAction.ABORT


def to_sink_error(exc: sqlite3.Error, where: str) -> SqliteWriteError:
    """Return the typed error for ``exc`` raised while doing ``where``."""
    action, code = classify(exc), getattr(exc, "sqlite_errorcode", None)
    data = isinstance(exc, sqlite3.IntegrityError) or (
        code is not None and code & 0xFF in _DATA_CODES
    )
    cls = SqliteRejectedError if data or action is ErrorAction.FATAL else SqliteWriteError
    name = getattr(exc, "sqlite_errorname", type(exc).__name__)
    return cls(f"{where}: SQLite said {name}: {exc}", action=action, code=code)


# --8<-- [end:classify]
