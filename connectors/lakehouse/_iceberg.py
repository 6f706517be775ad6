"""Apache Iceberg on pyiceberg: data files written by the tasks, one snapshot per epoch.

The task side (:class:`IcebergWriter`) writes its rows with pyiceberg's own data-file writer
(``write_file``: the table's schema with field ids, its partition spec, its location
provider, the column statistics), then a manifest of those files into the staging area: the
durable description the coordinator commits from (the way Iceberg's own streaming writers
hand files to their committer). The coordinator (:meth:`IcebergFormat.commit`) appends every
file of the epoch in one fast-append snapshot whose summary carries the sink id, the epoch
and the partitions' summaries, and records the epoch in the table property
``eos.epoch.<sink_id>`` in the same catalog commit.

A committed epoch is found by reading the snapshot history from the current snapshot back,
only as far as the last snapshot this process already knows (:meth:`IcebergFormat.last_commit`);
when the sink's snapshots have been expired, the table property answers.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from connectors._extras import require
from connectors.lakehouse._config import IcebergSinkConfig, is_local, local_path
from connectors.lakehouse._errors import (
    COMMIT_FAILED,
    READ_FAILED,
    WRITE_FAILED,
    LakehouseCode,
    LakehouseError,
)
from connectors.lakehouse._schema import TableLayout
from connectors.lakehouse._staging import StagedFile, Staging, VoteRecord
from connectors.lakehouse._table import Announce, EpochCommit, FileWriter, TableDriver, TableFormat
from connectors.stage._retry import RetryBound, retry
from txn import TxnCode, TxnError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

# Catalog commits of one epoch tried: pyiceberg rebases a fast append over concurrent
# commits itself (``commit.retry.*`` table properties); this covers failures it gives up on.
COMMIT_RETRY = RetryBound(attempts=5, window_s=10.0)
# The table property that records a sink's newest epoch (survives snapshot expiration).
EPOCH_PROPERTY = "eos.epoch."
_MANIFEST = "manifest"


def pyiceberg() -> Any:
    """Return the ``pyiceberg`` module, or :class:`MissingExtraError` naming the ``iceberg`` extra."""
    module = require("pyiceberg", extra="iceberg", needed_for="IcebergSink")
    require("pyiceberg.io.pyarrow", extra="iceberg", needed_for="IcebergSink")
    return module


def _error(code: LakehouseCode, what: str, exc: BaseException) -> LakehouseError:
    return LakehouseError(f"Iceberg table: {what}: {exc}", code=code)


# Catalogs loaded in this process, by name and properties: loading one opens its connections
# (an SQL catalog's engine, a REST catalog's session), not worth doing per call.
_CATALOGS: dict[tuple[str, tuple[tuple[str, str], ...]], Catalog] = {}
_CATALOGS_LOCK = threading.Lock()


def _load_catalog(name: str, properties: Mapping[str, str]) -> Catalog:
    pyiceberg()
    from pyiceberg.catalog import load_catalog

    try:
        return load_catalog(name, **dict(properties))
    except Exception as exc:
        raise _error(READ_FAILED, f"loading catalog {name!r}", exc) from exc


@dataclass(frozen=True, kw_only=True)
class IcebergFormat(TableFormat):
    """An Iceberg table: its catalog and identifier (picklable; each process loads it)."""

    catalog_name: str
    identifier: str
    catalog_properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    _seen: dict[str, tuple[int, EpochCommit]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def label(self) -> str:
        """Return the table's identifier in its catalog."""
        return f"{self.catalog_name}:{self.identifier}"

    def catalog(self) -> Catalog:
        """Return the catalog from pyiceberg's configuration and ``catalog_properties`` (one per process)."""
        key = (self.catalog_name, tuple(sorted(self.catalog_properties.items())))
        with _CATALOGS_LOCK:
            held = _CATALOGS.get(key)
            if held is None:
                held = _CATALOGS[key] = _load_catalog(self.catalog_name, self.catalog_properties)
        return held

    def table(self) -> Table:
        """Load the table (its current metadata)."""
        catalog = self.catalog()
        try:
            return catalog.load_table(self.identifier)
        except Exception as exc:
            raise _error(READ_FAILED, f"loading {self.identifier}", exc) from exc

    def staging(self, app: str) -> Staging:
        """Return the staging area of ``app`` under ``<table location>/_eos``."""
        import pyarrow.fs as pafs
        from pyiceberg.io.pyarrow import PyArrowFileIO

        table = self.table()
        scheme, netloc, root = PyArrowFileIO.parse_location(table.location())
        io = table.io
        fs = io.fs_by_scheme(scheme, netloc) if isinstance(io, PyArrowFileIO) else None
        if fs is None:
            fs = pafs.FileSystem.from_uri(table.location())[0]
        return Staging(fs, root, app, lambda uri: PyArrowFileIO.parse_location(uri)[2])

    def last_commit(self, app: str) -> EpochCommit | None:
        """Return the newest snapshot of ``app`` (history since the last one known), else the property."""
        table = self.table()
        seen = self._seen.get(app)
        snapshot = table.current_snapshot()
        while snapshot is not None:
            if seen is not None and snapshot.snapshot_id == seen[0]:
                return seen[1]
            summary = snapshot.summary
            found = None if summary is None else EpochCommit.parse(summary.additional_properties)
            if found is not None and found.app == app:
                self._seen[app] = (snapshot.snapshot_id, found)
                return found
            parent = snapshot.parent_snapshot_id
            snapshot = None if parent is None else table.snapshot_by_id(parent)
        recorded = table.properties.get(EPOCH_PROPERTY + app)
        return (
            None
            if recorded is None
            else EpochCommit(app=app, epoch=int(recorded), attempt=0, summaries={})
        )

    def writer(self, staging: Staging, record: VoteRecord, announce: Announce) -> IcebergWriter:
        """Return a task's writer: pyiceberg's data files, then their manifest in the staging area."""
        return IcebergWriter(self, staging, record, announce)

    def read(self, columns: Sequence[str]) -> pa.Table:
        """Return the ``columns`` of the table's current snapshot (a pyiceberg scan)."""
        return self.table().scan(selected_fields=tuple(columns)).to_arrow()

    def damaged(self, staging: Staging, records: Iterable[VoteRecord]) -> list[int]:
        """Partitions with a data file or manifest missing or of another size than written."""
        bad = []
        for record in records:
            paths = [staging.locate(f.path) for f in record.files]
            infos = staging.fs.get_file_info(paths) if paths else []
            if any(i.size != f.size for i, f in zip(infos, record.files, strict=True)):
                bad.append(record.partition)
        return bad

    def commit(self, commit: EpochCommit, records: Sequence[VoteRecord]) -> None:
        """One catalog commit: a fast append of every file, the summary, the epoch property."""
        manifests = [f for r in records for f in r.files if f.detail.get(_MANIFEST)]

        def attempt() -> None:
            table = self.table()
            last = self.last_commit(commit.app)
            if last is not None and last.epoch >= commit.epoch:
                return  # an earlier try landed after all: never commit an epoch twice
            files = [e.data_file for m in manifests for e in _entries(table, m)]
            with table.transaction() as tx:
                snapshot = tx.update_snapshot(snapshot_properties=commit.metadata())
                with snapshot.fast_append() as append:
                    for data_file in files:
                        append.append_data_file(data_file)
                tx.set_properties({EPOCH_PROPERTY + commit.app: str(commit.epoch)})

        try:
            retry(attempt, bound=COMMIT_RETRY, retriable=_transient)
        except Exception as exc:
            msg = f"committing epoch {commit.epoch} of sink {commit.app!r}"
            raise _error(COMMIT_FAILED, msg, exc) from exc


def _transient(exc: BaseException) -> bool:
    """Return a concurrent commit pyiceberg gave up on, or an I/O failure: worth another try."""
    from pyiceberg.exceptions import CommitFailedException

    return isinstance(exc, (CommitFailedException, OSError))


def _entries(table: Table, manifest: StagedFile) -> list[Any]:
    """Return the entries of a task's manifest (its data files, with partition and statistics)."""
    from pyiceberg.manifest import ManifestContent, ManifestFile

    ref = ManifestFile.from_args(
        manifest_path=manifest.path,
        manifest_length=manifest.size,
        partition_spec_id=int(manifest.detail["spec_id"]),
        content=ManifestContent.DATA,
        sequence_number=0,
        min_sequence_number=0,
        added_snapshot_id=-1,
    )
    return list(ref.fetch_manifest_entry(table.io))


class IcebergWriter(FileWriter):
    """One task's rows, held until :meth:`close` writes them as the table's data files."""

    def __init__(
        self, fmt: IcebergFormat, staging: Staging, record: VoteRecord, announce: Announce
    ) -> None:
        self._table = fmt.table()
        self._staging, self._record, self._announce = staging, record, announce
        self._batches: list[pa.RecordBatch] = []

    def write(self, batch: pa.RecordBatch) -> None:
        """Hold ``batch`` (pyiceberg splits the rows by partition and file size at close)."""
        self._batches.append(batch)

    def close(self) -> tuple[StagedFile, ...]:
        """Write the data files, each named ahead, then the manifest naming them."""
        import pyarrow as pa

        if not self._batches:
            return ()
        rows = pa.Table.from_batches(self._batches)
        self._batches = []
        try:
            files = [self._write(task) for task in self._tasks(rows)]
            return (*(f for f, _ in files), self._manifest([d for _, d in files]))
        except OSError as exc:
            raise _error(WRITE_FAILED, f"writing data files of {self._table.name()}", exc) from exc

    def _tasks(self, rows: pa.Table) -> Iterable[Any]:
        """Pyiceberg's write tasks for ``rows``: one per partition value and file size."""
        from pyiceberg.io.pyarrow import (
            _determine_partitions,
            bin_pack_arrow_table,
            pyarrow_to_schema,
        )
        from pyiceberg.table import TableProperties, WriteTask

        meta = self._table.metadata
        target = int(
            meta.properties.get(
                TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
            )
        )
        schema = pyarrow_to_schema(
            rows.schema,
            name_mapping=meta.schema().name_mapping,
            format_version=meta.format_version,
        )
        write_uuid = uuid.UUID(hex=self._record.token.ljust(32, "0"))
        counter = itertools.count(self._record.partition * 1_000_000)
        if meta.spec().is_unpartitioned():
            parts: list[tuple[Any, pa.Table]] = [(None, rows)]
        else:
            found = _determine_partitions(spec=meta.spec(), schema=meta.schema(), arrow_table=rows)
            parts = [(p.partition_key, p.arrow_table_partition) for p in found]
        for key, part in parts:
            for batches in bin_pack_arrow_table(part, target):
                yield WriteTask(
                    write_uuid=write_uuid,
                    task_id=next(counter),
                    record_batches=batches,
                    partition_key=key,
                    schema=schema,
                )

    def _write(self, task: Any) -> tuple[StagedFile, Any]:
        from pyiceberg.io.pyarrow import write_file
        from pyiceberg.table.locations import load_location_provider

        meta = self._table.metadata
        provider = load_location_provider(meta.location, meta.properties)
        path = provider.new_data_location(
            data_file_name=task.generate_data_file_filename("parquet"),
            partition_key=task.partition_key,
        )
        self._announce(path)
        (data_file,) = list(write_file(self._table.io, meta, iter([task])))
        if data_file.file_path != path:  # pragma: no cover - the same provider names it
            self._announce(data_file.file_path)
        staged = StagedFile(
            path=data_file.file_path, size=data_file.file_size_in_bytes, rows=data_file.record_count
        )
        return staged, data_file

    def _manifest(self, data_files: list[Any]) -> StagedFile:
        from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus, write_manifest

        meta = self._table.metadata
        base = self._table.location().rstrip("/")
        rel = self._staging.epoch_dir(self._record.epoch).rsplit(f"/{self._staging.app}/", 1)[1]
        path = f"{base}/_eos/{self._staging.app}/{rel}/{self._record.token}.avro"
        self._announce(path)
        output = self._table.io.new_output(path)
        with write_manifest(
            meta.format_version, meta.spec(), meta.schema(), output, -1, "null"
        ) as writer:
            for data_file in data_files:
                entry = ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED, snapshot_id=-1, data_file=data_file
                )
                writer.add_entry(entry)
        size = len(self._table.io.new_input(path))
        return StagedFile(
            path=path, size=size, rows=0, detail={_MANIFEST: True, "spec_id": meta.default_spec_id}
        )


# -- the driver's side: the table's definition, creating and evolving it -----------------------
class IcebergDriver(TableDriver):
    """An Iceberg table seen from the driver (pyiceberg and its catalog)."""

    def __init__(self, cfg: IcebergSinkConfig) -> None:
        self.cfg = cfg
        self.name = f"Iceberg table {cfg.table}"
        self.fmt = IcebergFormat(
            catalog_name=cfg.catalog,
            identifier=cfg.table,
            catalog_properties=cfg.catalog_properties,
        )

    def _find(self) -> Table | None:
        from pyiceberg.exceptions import NoSuchTableError

        catalog = self.fmt.catalog()
        try:
            return catalog.load_table(self.cfg.table)
        except NoSuchTableError:
            return None
        except Exception as exc:
            raise _error(READ_FAILED, f"loading {self.cfg.table}", exc) from exc

    def describe(self) -> tuple[pa.Schema, tuple[str, ...]] | None:
        """Return the table's Arrow schema and identity partition columns (None: no table yet)."""
        table = self._find()
        if table is None:
            return None
        schema = table.schema()
        names = tuple(schema.find_column_name(f.source_id) or "" for f in table.spec().fields)
        return schema.as_arrow(), names

    def create(self, schema: pa.Schema, partition_by: Sequence[str]) -> None:
        """Create the namespace and the table, partitioned by identity on ``partition_by``."""
        catalog = self.fmt.catalog()
        namespace = self.cfg.table.rsplit(".", 1)[0]
        try:
            catalog.create_namespace_if_not_exists(namespace)
            table = catalog.create_table_if_not_exists(self.cfg.table, schema=schema)
            if partition_by and table.spec().is_unpartitioned():
                with table.update_spec() as spec:
                    for name in partition_by:
                        spec.add_identity(name)
        except Exception as exc:
            raise _error(WRITE_FAILED, f"creating {self.cfg.table}", exc) from exc

    def add_columns(self, schema: pa.Schema, names: Sequence[str]) -> None:
        """Add the columns ``names`` of ``schema`` (optional) unless a replay added them."""
        import pyarrow as pa

        table = self.fmt.table()
        have = set(table.schema().as_arrow().names)
        new = [schema.field(n) for n in names if n not in have]
        if not new:
            return
        try:
            with table.update_schema() as update:
                update.union_by_name(pa.schema(new))
        except Exception as exc:
            raise _error(WRITE_FAILED, f"adding columns to {self.cfg.table}", exc) from exc

    def table_format(
        self, layout: TableLayout | None, partition_by: tuple[str, ...]
    ) -> IcebergFormat:
        """Return the format the write tasks get (they load the table themselves)."""
        return self.fmt

    def default_epoch_log(self) -> str:
        """``<table location>/_eos/<sink_id>.epochlog`` for a table on the local file system."""
        table = self._find()
        location = None if table is None else table.location()
        if location is None or not is_local(location):
            msg = (
                f"{self.name} is not on the local file system (or does not exist yet): pass "
                "epoch_log= (a file path on storage that survives the driver)"
            )
            raise TxnError(msg, code=TxnCode.CONFIG)
        return f"{local_path(location).rstrip('/')}/_eos/{self.cfg.sink_id}.epochlog"
