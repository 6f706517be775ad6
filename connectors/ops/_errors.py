"""Why ``eos`` refuses to report on a sink: typed, so the CLI maps them to exit codes."""

from __future__ import annotations

from typing import ClassVar

from txn import ErrorCode, TxnCode, TxnError


class UnknownSinkError(TxnError):
    """The epoch log holds no record of the sink id (exit code 3): nothing to report on.

    Either the id is wrong, or the sink keeps its log somewhere else (a file, another topic,
    a PostgreSQL sink's log table, another control schema); the message says which options
    point elsewhere.
    """

    default_code: ClassVar[ErrorCode] = TxnCode.EPOCH_LOG


class UnreadableLogError(TxnError):
    """``--epoch-log`` is a PostgreSQL connection string (exit code 4): ``--dsn`` takes it."""


class UsageError(TxnError):
    """Options that do not fit together, or a connection string that does not parse (exit 2).

    The message never repeats a connection string (it may hold a password).
    """

    default_code: ClassVar[ErrorCode] = TxnCode.CONFIG
