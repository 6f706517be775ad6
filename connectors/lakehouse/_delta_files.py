"""Delta Lake data files written by a task: Parquet in Hive-style directories, with statistics.

:class:`DeltaWriter` writes one file per partition value per task (rolled over past
``MAX_ROWS_PER_FILE`` rows), named ahead in the vote record, partition columns left out of
the file (Delta keeps their values in the log), with the statistics Delta readers skip files
by: ``numRecords``, ``nullCount``, ``minValues`` / ``maxValues`` of numbers, dates and
strings up to ``MAX_STAT_STRING`` characters (timestamps: null counts only, their text
precision differs between readers).
"""

from __future__ import annotations

import datetime
import json
import math
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from connectors.lakehouse._config import MAX_ROWS_PER_FILE
from connectors.lakehouse._errors import WRITE_FAILED, LakehouseCode, LakehouseError
from connectors.lakehouse._staging import StagedFile
from connectors.lakehouse._table import Announce, FileWriter

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

# Longest string whose min/max go into a file's statistics (Delta's own writers truncate
# there; a truncated maximum would not bound the column, so longer ones are left out).
MAX_STAT_STRING = 32
# Delta's name for a null partition value's directory.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def partition_value(value: object) -> str | None:
    """Delta's text form of a partition value (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value)


def _stat(value: object) -> object:
    """Return a statistics value as JSON, or None when it cannot bound the column."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str) and len(value) > MAX_STAT_STRING:
        return None
    if isinstance(value, datetime.datetime):
        return None  # timestamps: their text precision differs between readers
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, (int, float, str)):
        return value
    return None


class _FileStats:
    """Running statistics of one data file."""

    def __init__(self) -> None:
        self.rows = 0
        self.nulls: dict[str, int] = {}
        self.low: dict[str, Any] = {}
        self.high: dict[str, Any] = {}
        self.unbounded: set[str] = set()

    def add(self, batch: pa.RecordBatch) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.rows += batch.num_rows
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            self.nulls[name] = self.nulls.get(name, 0) + column.null_count
            kind = column.type
            if not (
                pa.types.is_integer(kind)
                or pa.types.is_floating(kind)
                or pa.types.is_date(kind)
                or pa.types.is_string(kind)
                or pa.types.is_large_string(kind)
            ) or column.null_count == len(column):
                continue
            bounds = pc.min_max(column)
            low, high = _stat(bounds["min"].as_py()), _stat(bounds["max"].as_py())
            if low is None or high is None:
                self.unbounded.add(name)
                continue
            self.low[name] = low if name not in self.low else min(self.low[name], low)
            self.high[name] = high if name not in self.high else max(self.high[name], high)

    def to_json(self) -> str:
        bounded = [n for n in self.low if n not in self.unbounded]
        return json.dumps(
            {
                "numRecords": self.rows,
                "minValues": {n: self.low[n] for n in bounded},
                "maxValues": {n: self.high[n] for n in bounded},
                "nullCount": self.nulls,
            },
            separators=(",", ":"),
        )


class DeltaWriter(FileWriter):
    """One task's data files: one open Parquet writer per partition value."""

    def __init__(
        self,
        storage: tuple[pafs.FileSystem, str],
        partition_by: tuple[str, ...],
        schema: pa.Schema | None,
        announce: Announce,
        name: str,
    ) -> None:
        (self._fs, self._root), self._partition_by = storage, partition_by
        self._schema, self._announce, self._name = schema, announce, name
        self._open: dict[tuple[str | None, ...], tuple[Any, StagedFile, _FileStats]] = {}
        self._done: list[StagedFile] = []
        self._count = 0

    def _relative(self, values: tuple[str | None, ...]) -> str:
        dirs = [
            f"{col}={quote(NULL_PARTITION if v is None else v, safe='')}"
            for col, v in zip(self._partition_by, values, strict=True)
        ]
        self._count += 1
        return "/".join([*dirs, f"{self._name}-{self._count:04d}.parquet"])

    def _file(
        self, values: tuple[str | None, ...], schema: pa.Schema
    ) -> tuple[Any, StagedFile, _FileStats]:
        import pyarrow.parquet as pq

        held = self._open.get(values)
        if held is not None and held[2].rows < MAX_ROWS_PER_FILE:
            return held
        if held is not None:
            self._finish(values)
        rel = self._relative(values)
        self._announce(rel)
        full = f"{self._root}/{rel}" if self._root else rel
        try:
            if "/" in rel:
                self._fs.create_dir(full.rsplit("/", 1)[0], recursive=True)
            writer = pq.ParquetWriter(self._fs.open_output_stream(full), schema)
        except OSError as exc:
            raise _error(WRITE_FAILED, f"creating {rel}", exc) from exc
        parts = dict(zip(self._partition_by, values, strict=True))
        self._open[values] = (
            writer,
            StagedFile(path=rel, detail={"partition": parts}),
            _FileStats(),
        )
        return self._open[values]

    def write(self, batch: pa.RecordBatch) -> None:
        """Write ``batch``'s rows into the file of each row's partition value."""
        cols = self._partition_by
        if not cols:
            self._write((), batch)
            return
        import pyarrow as pa
        import pyarrow.compute as pc

        table = pa.Table.from_batches([batch])
        data = table.drop_columns(list(cols))
        for key in table.select(list(cols)).group_by(list(cols)).aggregate([]).to_pylist():
            mask = None
            for col in cols:
                test = (
                    pc.is_null(table[col]) if key[col] is None else pc.equal(table[col], key[col])
                )
                mask = test if mask is None else pc.and_(mask, test)
            part = data.filter(mask)
            values = tuple(partition_value(key[c]) for c in cols)
            for piece in part.to_batches():
                self._write(values, piece)

    def _write(self, values: tuple[str | None, ...], batch: pa.RecordBatch) -> None:
        if self._schema is not None and batch.schema != self._schema:
            batch = batch.cast(self._schema)
        writer, _, stats = self._file(values, batch.schema)
        try:
            writer.write_batch(batch)
        except OSError as exc:
            raise _error(WRITE_FAILED, "writing a data file", exc) from exc
        stats.add(batch)

    def _finish(self, values: tuple[str | None, ...]) -> None:
        writer, staged, stats = self._open.pop(values)
        try:
            writer.close()
            size = self._fs.get_file_info(
                f"{self._root}/{staged.path}" if self._root else staged.path
            ).size
        except OSError as exc:
            raise _error(WRITE_FAILED, f"closing {staged.path}", exc) from exc
        detail = {**staged.detail, "stats": stats.to_json()}
        self._done.append(
            StagedFile(path=staged.path, size=int(size or 0), rows=stats.rows, detail=detail)
        )

    def close(self) -> tuple[StagedFile, ...]:
        """Close every open file; return them all."""
        for values in list(self._open):
            self._finish(values)
        return tuple(self._done)

    def abort(self) -> None:
        """Close the open files without describing them (the vote record deletes them)."""
        for writer, _, _ in self._open.values():
            try:
                writer.close()
            except Exception:  # noqa: BLE001, S112 - the file is deleted anyway
                continue
        self._open.clear()


def _error(code: LakehouseCode, what: str, exc: BaseException) -> LakehouseError:
    return LakehouseError(f"Delta table: {what}: {exc}", code=code)
