"""The error of the SQLite example sink and the one classifier of ``sqlite3`` errors.

One class, :class:`SqliteSinkError` (a :class:`txn.TxnError`), with a code per case (a bad
option is ``txn.TxnCode.CONFIG``); ``sqlite_code`` is SQLite's result code when SQLite
refused a call, ``action`` its classification::

    ALIGNED_MODE        aligned exactly-once was asked for: deadlocks on SQLite
    TABLE_NOT_FOUND     no database file or no table
    WRITE               SQLite refused a call (busy, locked, ...)
    REJECTED            a re-run cannot help (data, file)
    PARTITION_CONFLICT  another instance committed the epoch
"""

from __future__ import annotations

import sqlite3
from typing import ClassVar

from txn import ErrorAction, ErrorCode, TxnError


class SqliteCode(ErrorCode):
    """The cases of the SQLite example sink (see the module docstring)."""

    ERROR = ("sqlite", True)
    ALIGNED_MODE = ("aligned-mode", False)
    TABLE_NOT_FOUND = ("table-not-found", False)
    WRITE = ("write", True)
    REJECTED = ("rejected", False)
    PARTITION_CONFLICT = ("partition-conflict", True)


class SqliteSinkError(TxnError):
    """The error of :mod:`connectors.examples.sqlite`; ``sqlite_code`` as above."""

    default_code: ClassVar[ErrorCode] = SqliteCode.ERROR

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        action: ErrorAction | None = None,
        sqlite_code: int | None = None,
    ) -> None:
        super().__init__(message, code=code, action=action)
        self.sqlite_code = sqlite_code


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


def to_sink_error(exc: sqlite3.Error, where: str) -> SqliteSinkError:
    """Return the typed error for ``exc`` raised while doing ``where``."""
    action, code = classify(exc), getattr(exc, "sqlite_errorcode", None)
    data = isinstance(exc, sqlite3.IntegrityError) or (
        code is not None and code & 0xFF in _DATA_CODES
    )
    case = SqliteCode.REJECTED if data or action is ErrorAction.FATAL else SqliteCode.WRITE
    name = getattr(exc, "sqlite_errorname", type(exc).__name__)
    message = f"{where}: SQLite said {name}: {exc}"
    return SqliteSinkError(message, code=case, action=action, sqlite_code=code)


# --8<-- [end:classify]
