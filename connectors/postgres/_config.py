"""Validated, picklable configuration of a PostgreSQL sink.

Everything is checked at construction without network I/O (the connection string is
parsed by libpq's rules, not used); the result travels to the write tasks inside the
resource, so it is a frozen dataclass of plain values.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from connectors.postgres._errors import PostgresSinkError
from connectors.stage import StageOptions
from connectors.stage._options import build_config
from txn import Guarantee, TxnCode

# Version of the write scheme (load table, merge, marker layout); part of the fingerprint.
SCHEME_VERSION = 1
# Seconds libpq may take to open a connection before it gives up (then retried).
CONNECT_TIMEOUT_S = 10
# Milliseconds one statement may run: bounds a hung statement; one task's COPY and merge
# of a micro-batch take seconds, so ten minutes only ever stops a real hang.
STATEMENT_TIMEOUT_MS = 600_000
# Milliseconds a statement waits for a lock held by another transaction (for example a
# prepared transaction of a dead attempt that recovery has not rolled back yet).
LOCK_TIMEOUT_MS = 60_000
# TCP keepalive: a silently dead server or network is noticed after about
# IDLE + INTERVAL * COUNT seconds instead of the kernel's two hours.
KEEPALIVES_IDLE_S = 10
KEEPALIVES_INTERVAL_S = 5
KEEPALIVES_COUNT = 3

# The dead-letter table's name in the control schema unless dead_letter_table says otherwise.
DEFAULT_DEAD_LETTER_TABLE = "dead_letters"
# PostgreSQL truncates identifiers longer than NAMEDATALEN - 1 = 63 bytes.
MAX_IDENTIFIER_BYTES = 63
# sink ids appear in transaction ids (at most 200 bytes) and in lock and load table names.
_SINK_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class WriteMode(str, enum.Enum):
    """How rows reach the table.

    * ``APPEND``: every row is inserted (COPY straight into the table);
    * ``UPSERT``: insert, or update the row with the same key (the last row of a key in
      the partition wins);
    * ``CHANGELOG``: an ``op`` column says insert / update_after / delete per row
      (update_before rows are dropped); the last change of a key in the partition wins.
    """

    APPEND = "append"
    UPSERT = "upsert"
    CHANGELOG = "changelog"


class CommitProtocol(str, enum.Enum):
    """How an exactly-once epoch commits.

    * ``TWO_PHASE``: each task ends with PREPARE TRANSACTION; the coordinator commits;
    * ``IDEMPOTENCY_TABLE``: each task commits its local transaction, which also updates
      the partition's row of the idempotency table (redo-or-skip, like the Kafka markers);
    * ``AUTO``: two-phase when the server allows prepared transactions
      (``max_prepared_transactions`` > 0), else the idempotency table.
    """

    AUTO = "auto"
    TWO_PHASE = "two-phase"
    IDEMPOTENCY_TABLE = "idempotency-table"


def _parse_enum(enum_type: type[enum.Enum], what: str, value: object) -> enum.Enum:
    if isinstance(value, enum_type):
        return value
    try:
        return enum_type(value)
    except ValueError:
        choices = ", ".join(str(m.value) for m in enum_type)
        msg = f"{what} must be one of: {choices}; got {value!r}"
        raise PostgresSinkError(msg, code=TxnCode.CONFIG) from None


def _identifier(what: str, value: object) -> str:
    if not isinstance(value, str) or not value or "\0" in value:
        msg = f"{what} must be a non-empty name, got {value!r}"
        raise PostgresSinkError(msg, code=TxnCode.CONFIG)
    if len(value.encode()) > MAX_IDENTIFIER_BYTES:
        msg = f"{what} {value!r} is longer than PostgreSQL's {MAX_IDENTIFIER_BYTES}-byte name limit"
        raise PostgresSinkError(msg, code=TxnCode.CONFIG)
    return value


def _positive_int(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"{what} must be a positive int, got {value!r}"
        raise PostgresSinkError(msg, code=TxnCode.CONFIG)
    return value


def _check_dsn(dsn: object) -> str:
    if not isinstance(dsn, str):
        msg = f"dsn must be a libpq connection string or URI, got {type(dsn).__name__}"
        raise PostgresSinkError(msg, code=TxnCode.CONFIG)
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        msg = f"dsn is not a valid libpq connection string ({exc}); e.g. 'host=db dbname=app'"
        raise PostgresSinkError(msg, code=TxnCode.CONFIG) from None
    return dsn


def _check_follow(cfg: PostgresSinkConfig, mode: WriteMode, keys: tuple[str, ...]) -> None:
    for name in ("create_table", "evolve_schema"):
        if not isinstance(getattr(cfg, name), bool):
            msg = f"{name} must be True or False, got {getattr(cfg, name)!r}"
            raise PostgresSinkError(msg, code=TxnCode.CONFIG)
    if cfg.create_table and mode is not WriteMode.APPEND and not keys:
        msg = (
            f"create_table=True with write_mode {mode.value!r} needs key_columns: the primary "
            "key of the table the sink creates, e.g. key_columns=['id']"
        )
        raise PostgresSinkError(msg, code=TxnCode.CONFIG)


@dataclass(frozen=True, kw_only=True)
class PostgresSinkConfig(StageOptions):
    """Validated options of one PostgreSQL sink (``PostgresSink(dsn, table, sink_id, ...)``).

    The options every sink on the stage shares (guarantee, mode, parallelism,
    stage_retries, vote_channel, order_by, start_over, ...) come from
    :class:`connectors.stage.StageOptions`; the PostgreSQL ones:

    * ``dsn``: a libpq connection string or URI; ``table`` in ``schema``;
    * ``sink_id``: the sink's identity (gids, markers, locks, load tables derive from it);
    * ``write_mode``: append, upsert on ``key_columns``, or a changelog (``op_column``);
    * ``commit_protocol``: two-phase, idempotency table, or auto (the server decides);
    * ``control_schema``: where the markers and the epoch log tables live;
    * ``epoch_log``: None for the epoch log table in the database, or a file path;
    * ``create_table``: create the table from the input's columns if it does not exist;
      ``evolve_schema``: add the nullable columns the input gained (docs/postgres-sink.md,
      "Tables that follow the stream");
    * ``dead_letter_table``: with ``on_bad_record="dead-letter"``, the table of the control
      schema bad records go to (default ``dead_letters``; created if missing);
      docs/bad-records.md;
    * the three timeouts below (named constants, defaults explained there).
    """

    dsn: str
    table: str
    sink_id: str
    schema: str = "public"
    write_mode: WriteMode = WriteMode.APPEND
    key_columns: tuple[str, ...] = ()
    op_column: str = "op"
    commit_protocol: CommitProtocol = CommitProtocol.AUTO
    control_schema: str = "eos"
    epoch_log: str | None = None
    create_table: bool = False
    evolve_schema: bool = False
    dead_letter_table: str | None = None
    connect_timeout_s: int = CONNECT_TIMEOUT_S
    statement_timeout_ms: int = STATEMENT_TIMEOUT_MS
    lock_timeout_ms: int = LOCK_TIMEOUT_MS

    @classmethod
    def build(cls, **options: Any) -> PostgresSinkConfig:
        """Validate raw options and return the config, or raise :class:`TxnCode.CONFIG`."""
        return build_config(cls, options, PostgresSinkError, "PostgresSink")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.sink_id, str) or not _SINK_ID.match(self.sink_id):
            msg = f"sink_id must be 1-64 characters from A-Z a-z 0-9 . _ -, got {self.sink_id!r}"
            raise PostgresSinkError(msg, code=TxnCode.CONFIG)
        mode = WriteMode(_parse_enum(WriteMode, "write_mode", self.write_mode))
        if isinstance(self.key_columns, str):
            msg = (
                "key_columns must be a sequence of column names, e.g. ['id'], got "
                f"{self.key_columns!r}"
            )
            raise PostgresSinkError(msg, code=TxnCode.CONFIG)
        keys = tuple(_identifier("key column", k) for k in self.key_columns)
        if keys and mode is WriteMode.APPEND:
            msg = "key_columns is only used by write_mode 'upsert' and 'changelog'; remove it"
            raise PostgresSinkError(msg, code=TxnCode.CONFIG)
        if len(set(keys)) != len(keys):
            msg = f"key_columns {list(keys)} names a column twice"
            raise PostgresSinkError(msg, code=TxnCode.CONFIG)
        _check_follow(self, mode, keys)
        log_path = None if self.epoch_log is None else os.fspath(self.epoch_log)
        if log_path is not None and not log_path:
            msg = "epoch_log must be a file path, or None for the epoch log table"
            raise PostgresSinkError(msg, code=TxnCode.CONFIG)
        set_ = object.__setattr__
        set_(self, "dsn", _check_dsn(self.dsn))
        set_(self, "table", _identifier("table", self.table))
        set_(self, "schema", _identifier("schema", self.schema))
        set_(self, "write_mode", mode)
        set_(self, "key_columns", keys)
        set_(self, "op_column", _identifier("op_column", self.op_column))
        set_(
            self,
            "commit_protocol",
            CommitProtocol(_parse_enum(CommitProtocol, "commit_protocol", self.commit_protocol)),
        )
        set_(self, "control_schema", _identifier("control_schema", self.control_schema))
        set_(self, "epoch_log", log_path)
        set_(self, "dead_letter_table", self._dead_letter_table())
        for name in ("connect_timeout_s", "statement_timeout_ms", "lock_timeout_ms"):
            set_(self, name, _positive_int(name, getattr(self, name)))

    def _dead_letter_table(self) -> str | None:
        if self.on_bad_record != "dead-letter":
            if self.dead_letter_table is not None:
                msg = "dead_letter_table only applies with on_bad_record='dead-letter'; remove it"
                raise PostgresSinkError(msg, code=TxnCode.CONFIG)
            return None
        name = (
            DEFAULT_DEAD_LETTER_TABLE if self.dead_letter_table is None else self.dead_letter_table
        )
        return _identifier("dead_letter_table", name)

    @property
    def follows_stream(self) -> bool:
        """True when the sink creates or evolves the table (its DDL runs before each plan)."""
        return self.create_table or self.evolve_schema

    @property
    def transactional(self) -> bool:
        """True when epochs are exactly-once (markers and, if chosen, prepared transactions)."""
        return self.guarantee is Guarantee.EXACTLY_ONCE

    def fingerprint(self) -> str:
        """Digest of the options that decide what a partition's rows do to the table."""
        doc = {
            "v": SCHEME_VERSION,
            "table": [self.schema, self.table],
            "write_mode": self.write_mode.value,
            "key_columns": list(self.key_columns),
            "op_column": self.op_column if self.write_mode is WriteMode.CHANGELOG else None,
            "control_schema": self.control_schema,
            **self.routing_fingerprint(),
        }
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(raw).hexdigest()[:16]
