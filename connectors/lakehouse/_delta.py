"""Delta Lake on delta-rs: data files written by the tasks, one commit per epoch with its app transaction.

The task side writes Parquet files (``_delta_files.DeltaWriter``; an upsert's staged changes:
``_changes``). The coordinator (:meth:`DeltaFormat.commit`) commits every file of the epoch in one
``create_write_transaction`` carrying the app transaction ``(sink_id, epoch)`` and the
epoch's summary in the commit info; ``DeltaTable.transaction_version(sink_id)`` then tells
any later reader that the epoch is in the table.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from connectors._extras import require
from connectors.lakehouse._changes import ChangeWriter
from connectors.lakehouse._config import DeltaSinkConfig, is_local
from connectors.lakehouse._delta_files import DeltaWriter
from connectors.lakehouse._errors import (
    COMMIT_FAILED,
    READ_FAILED,
    WRITE_FAILED,
    LakehouseCode,
    LakehouseError,
)
from connectors.lakehouse._schema import TableLayout
from connectors.lakehouse._staging import STAGING_DIR, Staging, VoteRecord
from connectors.lakehouse._table import Announce, EpochCommit, FileWriter, TableDriver, TableFormat
from connectors.stage._retry import RetryBound, retry

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs
    from deltalake import DeltaTable

# Commits of one epoch tried (each after reloading the table): delta-rs already rebases an
# append over concurrent commits itself; this covers failures it gives up on.
COMMIT_RETRY = RetryBound(attempts=5, window_s=10.0)


def deltalake() -> Any:
    """Return the ``deltalake`` module, or :class:`MissingExtraError` naming the ``delta`` extra."""
    return require("deltalake", extra="delta", needed_for="DeltaSink")


def _error(code: LakehouseCode, what: str, exc: BaseException) -> LakehouseError:
    return LakehouseError(f"Delta table: {what}: {exc}", code=code)


def _merge_into(
    self: DeltaFormat, table: DeltaTable, records: Sequence[VoteRecord], props: Any
) -> None:
    """Merge every partition's staged changes into ``table`` in one commit carrying ``props``."""
    import pyarrow.dataset as ds

    staging = self.staging("")
    paths = [staging.locate(f.path) for r in records for f in r.files]
    source = ds.dataset(paths, filesystem=staging.fs, format="parquet").to_table()
    match = " AND ".join(f"t.{k} = s.{k}" for k in self.keys)
    merger = table.merge(source, match, source_alias="s", target_alias="t", commit_properties=props)
    op = self.op_column
    if op is None:
        merger = merger.when_matched_update_all().when_not_matched_insert_all()
    else:
        kept = f"s.{op} <> 'delete'"
        merger = (
            merger.when_matched_delete(predicate=f"s.{op} = 'delete'")
            .when_matched_update_all(predicate=kept, except_cols=[op])
            .when_not_matched_insert_all(predicate=kept, except_cols=[op])
        )
    merger.execute()


@dataclass(frozen=True, kw_only=True)
class DeltaFormat(TableFormat):
    """A Delta table: where it is and how its data files are laid out (picklable).

    ``partition_by``: the table's partition columns (read from the table on the driver);
    ``schema``: the columns the tasks write, as the files hold them (``_schema.normalized``);
    ``keys`` / ``op_column``: an upsert or changelog, committed by one merge per epoch.
    """

    uri: str
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    partition_by: tuple[str, ...] = ()
    schema: pa.Schema | None = None  # the written columns (partition columns included)
    keys: tuple[str, ...] = ()  # upsert / changelog: merged on these columns
    op_column: str | None = None  # changelog: the op column of the staged changes

    @property
    def label(self) -> str:
        """Return the table's URI."""
        return self.uri

    def file_schema(self) -> pa.Schema | None:
        """Return the schema of a data file: ``schema`` without the partition columns."""
        if self.schema is None:
            return None
        keep = [f for f in self.schema if f.name not in self.partition_by]
        import pyarrow as pa

        return pa.schema(keep)

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """Return a pyarrow file system over the table's storage, and the table root's path in it."""
        import pyarrow.fs as pafs

        if is_local(self.uri):
            return pafs.LocalFileSystem(), self.uri.rstrip("/")
        handler = deltalake().fs.DeltaStorageHandler(self.uri, dict(self.storage_options))
        return pafs.PyFileSystem(handler), ""

    def table(self) -> DeltaTable:
        """Open the table (its newest version)."""
        try:
            table: DeltaTable = deltalake().DeltaTable(
                self.uri, storage_options=dict(self.storage_options) or None
            )
        except Exception as exc:
            raise _error(READ_FAILED, f"opening {self.uri}", exc) from exc
        return table

    def staging(self, app: str) -> Staging:
        """Return the staging area of ``app`` under ``<table>/_eos``."""
        from urllib.parse import unquote

        fs, root = self.filesystem()
        return Staging(fs, root, app, lambda p: f"{root}/{unquote(p)}" if root else unquote(p))

    def last_commit(self, app: str) -> EpochCommit | None:
        """Return the app transaction of ``app``, with the summary of the commit that wrote it."""
        table = self.table()
        version = table.transaction_version(app)
        if version is None:
            return None
        return self._commit_of(table, app, version) or EpochCommit(
            app=app, epoch=version, attempt=0, summaries={}
        )

    @staticmethod
    def _commit_of(table: DeltaTable, app: str, epoch: int) -> EpochCommit | None:
        """Return the commit info of ``app``'s epoch ``epoch``, newest commits first."""
        limit = 16
        while True:
            infos = table.history(limit)
            for info in infos:
                found = EpochCommit.parse(info)
                if found is not None and found.app == app and found.epoch == epoch:
                    return found
            if len(infos) < limit:
                return None  # the history is shorter than asked (or cleaned up): no summary
            limit *= 4

    def writer(self, staging: Staging, record: VoteRecord, announce: Announce) -> FileWriter:
        """Return a task's writer of data files ``part-<partition>-<epoch>-<token>-NNNN.parquet``."""
        name = f"part-{record.partition:05d}-{record.epoch}-{record.token}"
        if not self.keys:
            fs, root = self.filesystem()
            return DeltaWriter((fs, root), self.partition_by, self.file_schema(), announce, name)
        import pyarrow as pa

        rel = f"{STAGING_DIR}/{staging.app}/{record.epoch:020d}/{name}.parquet"
        assert self.schema is not None  # noqa: S101 - set for every resource that writes
        shipped = self.schema
        if self.op_column is not None:
            shipped = shipped.append(pa.field(self.op_column, pa.string()))
        paths = (rel, staging.locate(rel))
        return ChangeWriter(staging.fs, paths, announce, shipped, self.keys, self.op_column)

    _merge = _merge_into

    def read(self, columns: Sequence[str]) -> pa.Table:
        """Return the ``columns`` of the table's newest version (delta-rs to Arrow)."""
        import pyarrow as pa

        return pa.table(self.table().to_pyarrow_table(columns=list(columns)))

    def damaged(self, staging: Staging, records: Iterable[VoteRecord]) -> list[int]:
        """Partitions with a data file missing or of another size than written."""
        bad = []
        for record in records:
            paths = [staging.locate(f.path) for f in record.files]
            infos = staging.fs.get_file_info(paths) if paths else []
            sizes = [f.size for f in record.files]
            if any(i.size != s for i, s in zip(infos, sizes, strict=True)):
                bad.append(record.partition)
        return bad

    def commit(self, commit: EpochCommit, records: Sequence[VoteRecord]) -> None:
        """One transaction: every file, the app transaction ``(app, epoch)``, the summary."""
        lake = deltalake()
        from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

        now = int(time.time() * 1000)
        adds: list[AddAction | RemoveAction] = (
            []
            if self.keys
            else [
                AddAction(
                    f.path,
                    f.size,
                    dict(f.detail.get("partition", {})),
                    now,
                    True,
                    f.detail["stats"],
                )
                for r in records
                for f in r.files
            ]
        )
        props = CommitProperties(
            custom_metadata=commit.metadata(),
            app_transactions=[Transaction(commit.app, commit.epoch)],
        )

        def attempt() -> None:
            table = self.table()
            done = table.transaction_version(commit.app)
            if done is not None and done >= commit.epoch:
                return  # an earlier try landed after all: never commit an epoch twice
            if self.keys and any(r.files for r in records):
                self._merge(table, records, props)
                if table.transaction_version(commit.app) == commit.epoch:
                    return  # else the merge changed nothing and made no commit: record it below
                table = self.table()
            table.create_write_transaction(
                adds,
                "append",
                table.schema(),
                partition_by=list(table.metadata().partition_columns),
                commit_properties=props,
            )

        try:
            retry(attempt, bound=COMMIT_RETRY, retriable=_transient(lake))
        except Exception as exc:
            msg = f"committing epoch {commit.epoch} of sink {commit.app!r}"
            raise _error(COMMIT_FAILED, msg, exc) from exc


def _transient(lake: Any) -> Any:
    """Errors worth another commit attempt: a conflict delta-rs gave up on, an I/O failure."""
    conflict = lake.exceptions.CommitFailedError

    def transient(exc: BaseException) -> bool:
        return isinstance(exc, (conflict, OSError))

    return transient


# -- the driver's side: the table's definition, creating and evolving it -----------------------
def exists(fmt: DeltaFormat) -> bool:
    """Whether a Delta table is at ``fmt.uri``."""
    lake = deltalake()
    return bool(lake.DeltaTable.is_deltatable(fmt.uri, dict(fmt.storage_options) or None))


def describe(fmt: DeltaFormat) -> tuple[pa.Schema, tuple[str, ...]] | None:
    """Return the table's Arrow schema and partition columns (None: no table yet)."""
    import pyarrow as pa

    if not exists(fmt):
        return None
    table = fmt.table()
    return pa.schema(table.schema().to_arrow()), tuple(table.metadata().partition_columns)


def create(fmt: DeltaFormat, schema: pa.Schema, partition_by: Sequence[str]) -> None:
    """Create the table (an existing one is kept: a replayed epoch creates it again)."""
    lake = deltalake()
    try:
        lake.DeltaTable.create(
            fmt.uri,
            schema=schema,
            partition_by=list(partition_by) or None,
            mode="ignore",
            storage_options=dict(fmt.storage_options) or None,
        )
    except Exception as exc:
        raise _error(WRITE_FAILED, f"creating {fmt.uri}", exc) from exc


def add_columns(fmt: DeltaFormat, schema: pa.Schema, names: Sequence[str]) -> None:
    """Add the columns ``names`` of ``schema`` (nullable) unless a replay added them already."""
    import pyarrow as pa

    lake = deltalake()
    table = fmt.table()
    have = set(pa.schema(table.schema().to_arrow()).names)
    new = [schema.field(n) for n in names if n not in have]
    if not new:
        return
    fields = lake.Schema.from_arrow(pa.schema(new)).fields
    try:
        table.alter.add_columns(list(fields))
    except Exception as exc:
        raise _error(
            WRITE_FAILED, f"adding columns {[f.name for f in new]} to {fmt.uri}", exc
        ) from exc


class DeltaDriver(TableDriver):
    """A Delta table seen from the driver (delta-rs)."""

    def __init__(self, cfg: DeltaSinkConfig) -> None:
        self.cfg = cfg
        self.name = f"Delta table {cfg.table_uri}"
        self._fmt = DeltaFormat(uri=cfg.table_uri, storage_options=cfg.storage_options)

    def describe(self) -> tuple[pa.Schema, tuple[str, ...]] | None:
        return describe(self._fmt)

    def create(self, schema: pa.Schema, partition_by: Sequence[str]) -> None:
        create(self._fmt, schema, partition_by)

    def add_columns(self, schema: pa.Schema, names: Sequence[str]) -> None:
        add_columns(self._fmt, schema, names)

    def table_format(
        self, layout: TableLayout | None, partition_by: tuple[str, ...]
    ) -> TableFormat:
        if layout is None:
            return DeltaFormat(
                uri=self.cfg.table_uri,
                storage_options=self.cfg.storage_options,
                partition_by=partition_by,
            )
        return DeltaFormat(
            uri=self.cfg.table_uri,
            storage_options=self.cfg.storage_options,
            partition_by=partition_by,
            schema=layout.schema,
            keys=layout.keys,
            op_column=layout.op_column,
        )

    def default_epoch_log(self) -> str:
        return self.cfg.epoch_log_path
