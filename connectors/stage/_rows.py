"""One write task's rows as Arrow batches, with an order-independent checksum.

The content checksum of a write partition is the sum, modulo 2**64, of a 64-bit hash
per row (Spark's ``xxhash64`` of every written column, computed in the JVM as the
hidden column ``_eos_hash``). A sum does not depend on the order in which Spark
delivers the rows, so a replay of the same batch yields the same checksum whatever
the upstream partitioning. With ``order_by`` the order is deterministic and the
checksum also covers it (each hash is multiplied by an odd, position-derived factor).

The rows arrive as a one-shot iterator and the participant contract reads them once
(docs/architecture.md, section 2): either :meth:`ArrowPartition.batches` while writing,
with the summary computed on the way, or :meth:`ArrowPartition.summary` alone when a
replay only compares. Nothing is held or spilled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from txn import RowSummary

HASH_COLUMN = "_eos_hash"


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


class RowsConsumedError(RuntimeError):
    """The rows of a write task were asked for a second time (a contract violation)."""


class ArrowPartition:
    """The rows of one write task, read once, summarized on the way.

    Contract: exactly one of :meth:`batches` (iterated to the end) or :meth:`summary`
    reads the rows; :meth:`summary` afterwards returns the same summary; a second read
    raises :class:`RowsConsumedError`. ``interrupt=(rows, callback)`` (fault injection, the
    stage's ``mid_write`` step for every participant): :meth:`batches` hands over exactly
    ``rows`` rows (splitting a batch if needed), then calls ``callback`` when the writer
    asks for more (or when the rows end), so the writer has them in flight.

    ``batch_id``: the micro-batch the rows belong to (None: unknown), recorded with each
    dead-lettered record. ``dead_lettered`` / ``skipped``: bad records the task set aside
    (``connectors.stage._bad_records`` counts them here; they travel back in the task's
    stats).
    """

    def __init__(
        self,
        batches: Iterable[pa.RecordBatch],
        *,
        ordered: bool = False,
        interrupt: tuple[int, Callable[[], None]] | None = None,
        batch_id: int | None = None,
    ) -> None:
        self.batch_id = batch_id
        self.dead_lettered = 0
        self.skipped = 0
        self._source: Iterator[pa.RecordBatch] | None = iter(batches)
        self._interrupt = interrupt
        self._ordered = ordered
        self._rows = 0
        self._total = 0
        self.nbytes = 0  # Arrow bytes read so far (metrics)
        self._summary: RowSummary | None = None

    @property
    def ordered(self) -> bool:
        """True when the checksum covers the order of the rows (``order_by``)."""
        return self._ordered

    def _take_source(self) -> Iterator[pa.RecordBatch]:
        if self._source is None:
            msg = "the rows of this write task were already read; the contract allows one pass"
            raise RowsConsumedError(msg)
        source, self._source = self._source, None
        return source

    def _account(self, batch: pa.RecordBatch) -> None:
        hashes = batch.column(batch.schema.get_field_index(HASH_COLUMN))
        self._total += combine_hashes(hashes, start=self._rows, ordered=self._ordered)
        self._rows += batch.num_rows
        self.nbytes += batch.nbytes

    def _finish(self) -> RowSummary:
        self._summary = RowSummary(
            rows=self._rows, checksum=format_checksum(self._total, ordered=self._ordered)
        )
        return self._summary

    def summary(self) -> RowSummary:
        """Row count and checksum of the partition (reads the rows unless already read)."""
        if self._summary is not None:
            return self._summary
        for batch in self._take_source():
            if batch.num_rows:
                self._account(batch)
        return self._finish()

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Yield the non-empty batches in the order Spark delivered them (once)."""
        for batch in self._take_source():
            for part in self._split(batch) if batch.num_rows else ():
                self._maybe_interrupt()
                self._account(part)
                yield part
        self._maybe_interrupt()
        self._finish()

    def _split(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """``batch``, cut where the interrupt's row count falls inside it."""
        if self._interrupt is None:
            return [batch]
        cut = self._interrupt[0] - self._rows
        if not 0 < cut < batch.num_rows:
            return [batch]
        return [batch.slice(0, cut), batch.slice(cut)]

    def _maybe_interrupt(self) -> None:
        if self._interrupt is not None and self._rows >= self._interrupt[0]:
            callback, self._interrupt = self._interrupt[1], None
            callback()
