"""One write partition's rows as Arrow batches, with an order-independent checksum.

The content checksum of a write partition is the sum, modulo 2**64, of a 64-bit hash
per row (Spark's ``xxhash64`` of every written column, computed in the JVM as the
hidden column ``_eos_hash``). A sum does not depend on the order in which Spark
delivers the rows, so a replay of the same batch yields the same checksum whatever
the upstream partitioning. With ``order_by`` the order is deterministic and the
checksum also covers it (each hash is multiplied by an odd, position-derived factor).

``txn.run_partition`` asks for the summary *before* it writes (to compare a replay
with the committed marker), and the rows of a task arrive as a one-shot iterator.
The Kafka participant streams: it writes while it summarizes (``batches()`` first,
the summary is computed on the way). For any other call order,
:class:`ArrowPartition` reads the batches once to summarize them, keeping them in
memory up to ``SPILL_THRESHOLD_BYTES`` and spilling to an Arrow IPC file in a local
temporary directory beyond that, so memory stays bounded.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from txn import RowSummary

HASH_COLUMN = "_eos_hash"
# Bytes of Arrow data a task keeps in memory while summarizing before it spills the
# partition to a local file: bounded memory per task, with no disk I/O for small epochs.
SPILL_THRESHOLD_BYTES = 64 * 1024 * 1024


def combine_hashes(hashes: pa.Array | pa.ChunkedArray, *, start: int = 0, ordered: bool) -> int:
    """Combine 64-bit row hashes into one value modulo 2**64 (vectorized).

    Args:
        hashes: int64 row hashes (no nulls).
        start: position of the first row in the partition (for ``ordered``).
        ordered: weight each hash by its position, so the result depends on order.

    """
    if len(hashes) == 0:
        return 0
    values = np.asarray(hashes.to_numpy(zero_copy_only=False), dtype=np.int64).view(np.uint64)
    if ordered:
        positions = np.arange(start, start + len(values), dtype=np.uint64)
        values = values * (positions * np.uint64(2) + np.uint64(1))
    return int(values.sum(dtype=np.uint64))


def format_checksum(total: int, *, ordered: bool) -> str:
    """Text form of a combined checksum (the prefix says which combination was used)."""
    return f"{'o' if ordered else 'u'}{total % (1 << 64):016x}"


class ArrowPartition:
    """The rows of one write task: re-iterable, summarized, bounded in memory.

    Contract: ``summary()`` may be called any number of times; ``batches()`` may be
    called after it any number of times, or once before it (then the summary is
    computed while streaming); ``close()`` removes the spill file.
    """

    def __init__(
        self,
        batches: Iterable[pa.RecordBatch],
        *,
        ordered: bool = False,
        spill_dir: str | None = None,
        spill_threshold: int = SPILL_THRESHOLD_BYTES,
    ) -> None:
        self._source: Iterator[pa.RecordBatch] | None = iter(batches)
        self._ordered = ordered
        self._spill_dir = spill_dir
        self._threshold = spill_threshold
        self._held: list[pa.RecordBatch] = []
        self._held_bytes = 0
        self._spill_path: str | None = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._rows = 0
        self._total = 0
        self._summary: RowSummary | None = None

    def _account(self, batch: pa.RecordBatch) -> None:
        hashes = batch.column(batch.schema.get_field_index(HASH_COLUMN))
        self._total += combine_hashes(hashes, start=self._rows, ordered=self._ordered)
        self._rows += batch.num_rows

    def _finish(self) -> RowSummary:
        self._summary = RowSummary(
            rows=self._rows, checksum=format_checksum(self._total, ordered=self._ordered)
        )
        self._source = None
        return self._summary

    def _keep(self, batch: pa.RecordBatch) -> None:
        if self._writer is None and self._held_bytes + batch.nbytes <= self._threshold:
            self._held.append(batch)
            self._held_bytes += batch.nbytes
            return
        if self._writer is None:
            fd, self._spill_path = tempfile.mkstemp(
                prefix="eos-spill-", suffix=".arrow", dir=self._spill_dir
            )
            os.close(fd)
            self._writer = pa.ipc.new_file(self._spill_path, batch.schema)
            for held in self._held:
                self._writer.write_batch(held)
            self._held = []
            self._held_bytes = 0
        self._writer.write_batch(batch)

    def summary(self, *, keep: bool = True) -> RowSummary:
        """Row count and checksum of the whole partition (reads it once if needed).

        ``keep=False``: the rows are not needed afterwards (a replay that only compares
        the summary), so nothing is held or spilled; ``batches()`` then yields nothing.
        """
        if self._summary is not None:
            return self._summary
        assert self._source is not None  # noqa: S101 - _summary is set once the source is gone
        for batch in self._source:
            if batch.num_rows:
                self._account(batch)
                if keep:
                    self._keep(batch)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return self._finish()

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Yield the partition's non-empty batches, in the order Spark delivered them."""
        if self._summary is None:
            assert self._source is not None  # noqa: S101 - see summary()
            for batch in self._source:
                if batch.num_rows:
                    self._account(batch)
                    yield batch
            self._finish()
            return
        yield from self._held
        if self._spill_path is not None:
            with pa.memory_map(self._spill_path) as source:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)

    def close(self) -> None:
        """Drop held batches and remove the spill file. Idempotent."""
        self._held = []
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._spill_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._spill_path)
            self._spill_path = None
