"""Validated, picklable options of the Delta Lake and Iceberg sinks (no I/O at construction).

:class:`TableSinkOptions` holds what both sinks share (the stage options come from
:class:`connectors.stage.StageOptions`); :class:`DeltaSinkConfig` and
:class:`IcebergSinkConfig` add where the table is. Every failure is a :class:`txn.TxnCode.CONFIG`
naming the option.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from connectors.stage import StageOptions
from connectors.stage._options import build_config
from txn import CommitMode, Guarantee, TxnCode, TxnError

# Version of the write scheme (staging layout, vote records, commit metadata); part of the
# fingerprint, so an epoch in doubt is never finished by another scheme.
SCHEME_VERSION = 1
# Rows per data file at most: a write task rolls over to a new file past it (the table
# readers' planning works per file; a task of a large epoch writes a few files).
MAX_ROWS_PER_FILE = 1_000_000
_SINK_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# Write modes (the values PostgresSink takes): every row appended; the last row of each key
# inserted or updating the table's row (a Delta merge); a changelog whose op column says
# insert / update_after / delete per row (update_before rows dropped).
APPEND, UPSERT, CHANGELOG = "append", "upsert", "changelog"
WRITE_MODES = (APPEND, UPSERT, CHANGELOG)
# Changelog ops written (update_before rows are dropped before routing).
WRITTEN_OPS = ("insert", "update_after", "delete")
# Key and op columns appear in the merge's SQL: plain identifiers only.
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COLUMN = re.compile(r"^[^\s,;{}()=]+$")


def _names(name: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(c, str) and _COLUMN.match(c) for c in value
    ):
        msg = f"{name} must be a list of column names, e.g. ['day'], got {value!r}"
        raise TxnError(msg, code=TxnCode.CONFIG)
    names = tuple(value)
    if len(set(names)) != len(names):
        msg = f"{name} names a column twice: {list(names)}"
        raise TxnError(msg, code=TxnCode.CONFIG)
    return names


def _settings(name: str, value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        msg = f"{name} must be a mapping of strings to strings (never shown in errors or logs)"
        raise TxnError(msg, code=TxnCode.CONFIG)
    return dict(value)


def is_local(uri: str) -> bool:
    """Return true when ``uri`` is a local path (plain, or ``file://``)."""
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def local_path(uri: str) -> str:
    """Return the local file system path of a plain path or ``file://`` URI."""
    return urlparse(uri).path if uri.startswith("file:") else os.path.abspath(uri)


@dataclass(frozen=True, kw_only=True)
class TableSinkOptions(StageOptions):
    """Options both table sinks share (``DeltaSink`` / ``IcebergSink``).

    ``sink_id`` (1-64 of ``A-Z a-z 0-9 . _ -``): names the epoch the table records (Delta's
    app transaction, Iceberg's snapshot summary) and the staging area; ``partition_by``:
    partition columns of a table the sink creates (an existing table keeps its own);
    ``create_table``: create the table from the first micro-batch's schema when it does not
    exist; ``evolve_schema``: add the columns the input gained (never drop or retype one);
    ``epoch_log``: the coordinator's log file (default: ``_eos/<sink_id>.epochlog`` in the
    table's directory when the table is on the local file system); ``write_mode``:
    ``"append"``, ``"upsert"`` or ``"changelog"`` (Delta only: one merge per epoch) with
    ``key_columns`` and, for a changelog, ``op_column`` (``insert`` / ``update_after`` /
    ``delete``; ``update_before`` rows are dropped). ``mode`` defaults to
    unaligned: the table commit is one transaction of the coordinator's, so an epoch is
    all-or-nothing for readers in both modes and the write tasks need no gang scheduling.
    Only exactly-once is offered (module docstring of :mod:`connectors.lakehouse`).
    """

    sink_id: str
    mode: CommitMode = CommitMode.UNALIGNED
    partition_by: tuple[str, ...] = ()
    create_table: bool = False
    evolve_schema: bool = False
    epoch_log: str | None = None
    write_mode: str = APPEND
    key_columns: tuple[str, ...] = ()
    op_column: str = "op"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_write_mode()
        if self.guarantee is not Guarantee.EXACTLY_ONCE:
            msg = (
                f"guarantee={self.guarantee.value!r}: the table sinks are exactly-once only (the "
                "one table commit per epoch that any writer makes carries the epoch, so a weaker "
                "guarantee would save nothing); drop the option"
            )
            raise TxnError(msg, code=TxnCode.CONFIG)
        if not isinstance(self.sink_id, str) or not _SINK_ID.match(self.sink_id):
            msg = f"sink_id must be 1-64 characters from A-Z a-z 0-9 . _ -, got {self.sink_id!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        object.__setattr__(self, "partition_by", _names("partition_by", self.partition_by))
        object.__setattr__(self, "create_table", bool(self.create_table))
        object.__setattr__(self, "evolve_schema", bool(self.evolve_schema))
        if self.epoch_log is not None:
            if not isinstance(self.epoch_log, (str, os.PathLike)) or not str(self.epoch_log):
                msg = f"epoch_log must be a file path, got {self.epoch_log!r}"
                raise TxnError(msg, code=TxnCode.CONFIG)
            object.__setattr__(self, "epoch_log", os.path.abspath(self.epoch_log))

    def _check_write_mode(self) -> None:
        if self.write_mode not in WRITE_MODES:
            msg = f"write_mode must be one of {list(WRITE_MODES)}, got {self.write_mode!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        keys = _names("key_columns", self.key_columns)
        object.__setattr__(self, "key_columns", keys)
        if self.keyed != bool(keys):
            msg = (
                f"write_mode={self.write_mode!r} needs key_columns (the columns a row is found by)"
                if self.keyed
                else "key_columns only apply to write_mode='upsert' or 'changelog'"
            )
            raise TxnError(msg, code=TxnCode.CONFIG)
        for name in (*keys, self.op_column):
            if not isinstance(name, str) or not _IDENTIFIER.match(name):
                msg = f"key and op columns must be plain identifiers ([A-Za-z_][A-Za-z0-9_]*), got {name!r}"
                raise TxnError(msg, code=TxnCode.CONFIG)

    @property
    def keyed(self) -> bool:
        """True for upserts and changelogs (rows find the table's row by ``key_columns``)."""
        return self.write_mode != APPEND

    def fingerprint(self) -> str:
        """Return a digest of what decides where rows land and what they do to the table."""
        raise NotImplementedError  # each format's config says where its table is

    def _fingerprint(self, **table: object) -> str:
        mode = {"mode": self.write_mode, "keys": list(self.key_columns)}
        if self.write_mode == CHANGELOG:
            mode["op"] = self.op_column
        doc = {"v": SCHEME_VERSION, **table, **mode, **self.routing_fingerprint()}
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class DeltaSinkConfig(TableSinkOptions):
    """Validated options of ``DeltaSink(table_uri, sink_id, ...)``.

    ``table_uri``: a local path or a URI delta-rs opens (``s3://``, ``gs://``, ``az://``,
    ...); ``storage_options``: delta-rs's object-store options (credentials, endpoint),
    passed through unchanged, never shown in a repr, error or log.
    """

    table_uri: str
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, **options: Any) -> DeltaSinkConfig:
        """Validate raw options; every failure is a :class:`txn.TxnCode.CONFIG` naming the option."""
        return build_config(cls, options, TxnError, "DeltaSink")

    def __post_init__(self) -> None:
        super().__post_init__()
        uri = self.table_uri
        if isinstance(uri, os.PathLike):
            uri = os.fspath(uri)
        if not isinstance(uri, str) or not uri.strip():
            msg = f"table_uri must be a path or URI of the Delta table, got {uri!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        object.__setattr__(self, "table_uri", local_path(uri) if is_local(uri) else uri)
        object.__setattr__(
            self, "storage_options", _settings("storage_options", self.storage_options)
        )
        if self.epoch_log is None and not is_local(self.table_uri):
            msg = (
                f"the table {self.table_uri!r} is not on the local file system: pass epoch_log= "
                "(a file path on storage that survives the driver) for the coordinator's log"
            )
            raise TxnError(msg, code=TxnCode.CONFIG)

    @property
    def epoch_log_path(self) -> str:
        """The epoch log file: ``epoch_log``, or ``<table>/_eos/<sink_id>.epochlog``."""
        return self.epoch_log or os.path.join(self.table_uri, "_eos", f"{self.sink_id}.epochlog")

    def fingerprint(self) -> str:
        """Digest of what decides where rows land and what they do to the table."""
        return self._fingerprint(
            format="delta", table=self.table_uri, partition_by=list(self.partition_by)
        )


@dataclass(frozen=True, kw_only=True)
class IcebergSinkConfig(TableSinkOptions):
    """Validated options of ``IcebergSink(table, sink_id, ...)``.

    ``table``: the table identifier (``namespace.table``); ``catalog``: the catalog's name in
    pyiceberg's own configuration (``.pyiceberg.yaml``, ``PYICEBERG_CATALOG__*`` variables);
    ``catalog_properties``: properties given to ``pyiceberg.catalog.load_catalog`` on top of
    that configuration (``type``, ``uri``, ``warehouse``, credentials), never shown in a
    repr, error or log. The driver and every executor load the catalog the same way.
    """

    table: str
    catalog: str = "default"
    catalog_properties: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, **options: Any) -> IcebergSinkConfig:
        """Validate raw options; every failure is a :class:`txn.TxnCode.CONFIG` naming the option."""
        return build_config(cls, options, TxnError, "IcebergSink")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.table, str) or "." not in self.table.strip(". "):
            msg = f"table must be a table identifier 'namespace.table', got {self.table!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        if not isinstance(self.catalog, str) or not self.catalog:
            msg = f"catalog must be a catalog name, got {self.catalog!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        object.__setattr__(
            self, "catalog_properties", _settings("catalog_properties", self.catalog_properties)
        )
        if self.keyed:
            msg = (
                f"write_mode={self.write_mode!r}: IcebergSink appends only (pyiceberg offers no "
                "merge that reads staged files and commits one snapshot with the epoch; see "
                "docs/iceberg-sink.md); use write_mode='append', or DeltaSink for upserts"
            )
            raise TxnError(msg, code=TxnCode.CONFIG)

    def fingerprint(self) -> str:
        """Digest of what decides where rows land and what they do to the table."""
        return self._fingerprint(
            format="iceberg",
            catalog=self.catalog,
            table=self.table,
            partition_by=list(self.partition_by),
        )
