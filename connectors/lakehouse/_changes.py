"""The task side of an upsert or a changelog: the last change of each key, staged for a merge.

A keyed epoch cannot be committed by adding files: each row must find the table's row of its
key. So a write task keeps, of its rows (all rows of a key land in one write partition, in
input order), the last change of each key, checks it (no null key; a changelog's op one of
``insert`` / ``update_after`` / ``delete``) and writes it as one Parquet file into the staging
area; the coordinator's commit merges every partition's file into the table in one
transaction that records the epoch (``_delta``). The staged file is never a table file: it is
deleted with the vote record, committed or not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from connectors.lakehouse._config import WRITTEN_OPS
from connectors.lakehouse._errors import WRITE_FAILED, LakehouseError
from connectors.lakehouse._staging import StagedFile
from connectors.lakehouse._table import Announce, FileWriter
from connectors.stage import StageCode, StageError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

SCRATCH = "scratch"  # StagedFile.detail key: a file of the staging area, never the table's
_POSITION = "_eos_position"


def last_changes(rows: pa.Table, keys: tuple[str, ...], op_column: str | None) -> pa.Table:
    """Return the last row of each key of ``rows`` (in their order), checked.

    Raises:
        StageCode.RECORD: a key column holds a null, or an op is not a written one.

    """
    import pyarrow as pa
    import pyarrow.compute as pc

    for key in keys:
        if rows[key].null_count:
            msg = f"key column {key!r} holds a null; an upsert finds rows by their key"
            raise StageError(msg, column=key, code=StageCode.RECORD)
    if op_column is not None:
        known = pc.is_in(rows[op_column], value_set=pa.array(WRITTEN_OPS))
        if not pc.all(pc.fill_null(known, False)).as_py():
            msg = f"op column {op_column!r} holds a value other than {list(WRITTEN_OPS)}"
            raise StageError(msg, column=op_column, code=StageCode.RECORD)
    numbered = rows.append_column(_POSITION, pa.array(range(rows.num_rows), pa.int64()))
    last = numbered.group_by(list(keys)).aggregate([(_POSITION, "max")])
    positions = last[f"{_POSITION}_max"]
    return rows.take(pc.take(positions, pc.sort_indices(positions)))


class ChangeWriter(FileWriter):
    """One task's last changes, written as one staged Parquet file at :meth:`close`."""

    def __init__(
        self,
        fs: pafs.FileSystem,
        paths: tuple[str, str],
        announce: Announce,
        schema: pa.Schema,
        keys: tuple[str, ...],
        op_column: str | None,
    ) -> None:
        self._fs, (self._name, self._full) = fs, paths
        self._announce, self._schema = announce, schema
        self._keys, self._op = keys, op_column
        self._batches: list[pa.RecordBatch] = []

    def write(self, batch: pa.RecordBatch) -> None:
        """Hold ``batch`` (the last change of a key is known once every row was read)."""
        self._batches.append(batch)

    def close(self) -> tuple[StagedFile, ...]:
        """Write the last changes (none: no file); return the staged file."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._batches:
            return ()
        rows = pa.Table.from_batches(self._batches).cast(self._schema)
        self._batches = []
        changes = last_changes(rows, self._keys, self._op)
        self._announce(self._name)
        try:
            self._fs.create_dir(self._full.rsplit("/", 1)[0], recursive=True)
            with self._fs.open_output_stream(self._full) as out:
                pq.write_table(changes, out)
            size = self._fs.get_file_info(self._full).size
        except OSError as exc:
            msg = f"staging the changes {self._name}: {exc}"
            raise LakehouseError(msg, code=WRITE_FAILED) from exc
        return (
            StagedFile(
                path=self._name, size=int(size or 0), rows=changes.num_rows, detail={SCRATCH: True}
            ),
        )
