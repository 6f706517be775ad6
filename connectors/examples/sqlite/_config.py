"""Validated, picklable options of the SQLite example sink (no I/O at construction)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from connectors.examples.sqlite._errors import SqliteCode, SqliteSinkError
from connectors.stage import StageOptions, build_config
from txn import CommitMode, Guarantee, TxnCode

# Version of the write scheme (marker table, insert); part of the fingerprint.
SCHEME_VERSION = 1
# Seconds a statement waits for the database's write lock before SQLITE_BUSY. The tasks of
# an epoch write one at a time, so a task may wait for the other partitions' inserts (about
# a million short rows a second, measured); 30 s covers epochs of tens of millions of rows.
BUSY_TIMEOUT_S = 30.0
_SINK_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def _file_path(name: str, value: object) -> str:
    if not isinstance(value, (str, os.PathLike)) or str(value) in ("", ":memory:"):
        msg = f"{name} must be a file path (the executors open it too), got {value!r}"
        raise SqliteSinkError(msg, code=TxnCode.CONFIG)
    return os.path.abspath(value)


# --8<-- [start:config]
@dataclass(frozen=True, kw_only=True)
class SqliteSinkConfig(StageOptions):
    """Validated options of one SQLite sink (``SqliteSink(path, table, sink_id, ...)``).

    The stage options (guarantee, mode, parallelism, stage_retries, order_by, ...) come from
    :class:`connectors.stage.StageOptions`, checked by its ``__post_init__``; the SQLite ones:
    ``path`` (the database file, made absolute: executors open it too), ``table``,
    ``sink_id`` (markers and the epoch log derive from it), ``epoch_log`` (default: a file
    next to the database) and ``busy_timeout_s``. ``mode`` defaults to unaligned; aligned
    exactly-once is refused (module docstring).
    """

    path: str
    table: str
    sink_id: str
    mode: CommitMode = CommitMode.UNALIGNED
    epoch_log: str | None = None
    busy_timeout_s: float = BUSY_TIMEOUT_S

    @classmethod
    def build(cls, **options: Any) -> SqliteSinkConfig:
        """Validate raw options; every failure is a :class:`TxnCode.CONFIG` naming the option."""
        return build_config(cls, options, SqliteSinkError, "SqliteSink")

    def __post_init__(self) -> None:
        super().__post_init__()  # the stage options: parallelism >= 1, stage_retries >= 0, ...
        if self.aligned:
            msg = (
                "mode='aligned' deadlocks on SQLite: every partition's transaction waits for "
                "the vote holding the database's only write lock; use mode='unaligned'"
            )
            raise SqliteSinkError(msg, code=SqliteCode.ALIGNED_MODE)
        if not isinstance(self.sink_id, str) or not _SINK_ID.match(self.sink_id):
            msg = f"sink_id must be 1-64 characters from A-Z a-z 0-9 . _ -, got {self.sink_id!r}"
            raise SqliteSinkError(msg, code=TxnCode.CONFIG)
        if not isinstance(self.table, str) or not self.table:
            msg = f"table must be a non-empty table name, got {self.table!r}"
            raise SqliteSinkError(msg, code=TxnCode.CONFIG)
        object.__setattr__(self, "path", _file_path("path", self.path))
        if self.epoch_log is not None:
            object.__setattr__(self, "epoch_log", _file_path("epoch_log", self.epoch_log))
        timeout = self.busy_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            msg = f"busy_timeout_s must be a positive number of seconds, got {timeout!r}"
            raise SqliteSinkError(msg, code=TxnCode.CONFIG)

    @property
    def epoch_log_path(self) -> str:
        """The epoch log file: ``epoch_log``, or ``<path>.<sink_id>.epochs``."""
        return self.epoch_log or f"{self.path}.{self.sink_id}.epochs"

    @property
    def transactional(self) -> bool:
        """True when epochs are exactly-once (the marker is written and read)."""
        return self.guarantee is Guarantee.EXACTLY_ONCE

    def fingerprint(self) -> str:
        """Digest of what decides where rows land and what they do to the table."""
        doc = {"v": SCHEME_VERSION, "table": self.table, **self.routing_fingerprint()}
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


# --8<-- [end:config]
