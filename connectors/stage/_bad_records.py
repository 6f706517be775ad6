"""The bad-record layer: a write task's rows split into good rows and bad records.

With ``on_bad_record="dead-letter"`` or ``"skip"`` (:class:`~connectors.stage.StageOptions`)
a connector wraps its participant with :func:`screened`. The wrapper hands the writer a
:class:`ScreenedPartition`: each Arrow batch goes through the connector's
:class:`Classifier` first (vectorized checks, deterministic per record: the same rows and
options give the same verdicts at every replay), and only the good rows reach the writer.
The bad records (the original columns plus the error class and message) are then

* ``dead-letter``: handed to the participant's ``write_dead_letters`` (same transaction as
  the good rows: the dead-letter topic or table is exactly-once too), or
* ``skip``: logged with their reasons (the first :data:`MAX_LOGGED_PER_TASK` one line each,
  then one line of counts per error class) and left out;

and counted on the task's rows (``ArrowPartition.dead_lettered`` / ``skipped``, into the
epoch's metrics). A participant may also reject rows itself while writing (PostgreSQL:
a value or a constraint the server refuses, isolated under savepoints); it returns them
from ``rejected_records()`` and they are treated the same way.

The classification is part of the partition's checksum: a partition with bad records
carries ``+b<count>.<digest>`` after the rows' checksum, the digest summing each bad row's
content hash weighted by its error class, so a replay of a committed partition that
classifies otherwise is a :class:`txn.TxnCode.NON_DETERMINISTIC_REPLAY`, never a silent
difference. Rows rejected by a server are not part of it (the server decides them while
the transaction runs; they are committed with it). The task's row count is the good rows';
the marker's is the rows the classifier let through (the server's rejections included), so
that a replay which only compares recounts it.

Circuit breaker: more bad records than ``max_bad_fraction`` of the partition's rows raise
:class:`connectors.stage.StageCode.BAD_RECORD_THRESHOLD` before anything is pre-committed.
docs/bad-records.md has the user's view.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from connectors.stage._errors import StageCode, StageError
from connectors.stage._options import StageOptions
from connectors.stage._rows import HASH_COLUMN, ArrowPartition
from txn import Marker, Participant, RowSummary

log = logging.getLogger("connectors.stage.bad_records")

# Columns the layer adds to a batch of bad records (beside the original columns).
ERROR_CLASS_COLUMN = "_eos_error_class"
ERROR_MESSAGE_COLUMN = "_eos_error_message"
# Bad records a skipping task logs one line each for; the rest are counted per class.
MAX_LOGGED_PER_TASK = 20
# Characters of an error message kept with a bad record (messages may quote data).
MAX_MESSAGE_CHARS = 500
_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class BadRow:
    """A row of a batch that cannot be written: its index, error code (``code.text``) and message."""

    index: int
    error: str
    message: str


class Classifier(Protocol):
    """A connector's per-record checks (deterministic: the same row, the same verdict)."""

    def classify(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, Sequence[BadRow]]:
        """Return the good rows to write (maybe re-encoded) and the bad rows of ``batch``.

        ``BadRow.index`` is a row of ``batch``; :func:`drop_rows` makes the good rows.
        """


@dataclass(frozen=True, kw_only=True)
class DeadLetterContext:
    """Where bad records came from, recorded with each dead-lettered record."""

    sink_id: str
    epoch: int
    partition: int
    batch_id: int | None = None


def drop_rows(batch: pa.RecordBatch, indices: Sequence[int]) -> pa.RecordBatch:
    """Return ``batch`` without the rows ``indices`` (unchanged when there are none)."""
    if not indices:
        return batch
    keep = np.ones(batch.num_rows, dtype=bool)
    keep[list(indices)] = False
    return batch.filter(pa.array(keep))


def bad_batch(batch: pa.RecordBatch, bad: Sequence[BadRow]) -> pa.RecordBatch:
    """Return the rows ``bad`` of ``batch`` with the error class and message columns."""
    taken = batch.take(pa.array([b.index for b in bad], type=pa.int64()))
    errors = pa.array([b.error for b in bad], type=pa.string())
    messages = pa.array([b.message[:MAX_MESSAGE_CHARS] for b in bad], type=pa.string())
    return pa.RecordBatch.from_arrays(
        [*taken.columns, errors, messages],
        names=[*taken.schema.names, ERROR_CLASS_COLUMN, ERROR_MESSAGE_COLUMN],
    )


def _class_weight(error: str) -> int:
    """Return an odd 64-bit factor per error class (stable across processes)."""
    return (zlib.crc32(error.encode()) << 1) | 1


def bad_digest(records: pa.RecordBatch) -> int:
    """Sum of the bad rows' content hashes, each weighted by its error class (mod 2**64)."""
    hashes = records.column(records.schema.get_field_index(HASH_COLUMN)).to_numpy(
        zero_copy_only=False
    )
    errors = records.column(records.schema.get_field_index(ERROR_CLASS_COLUMN)).to_pylist()
    weights = np.array([_class_weight(e) for e in errors], dtype=np.uint64)
    values = np.asarray(hashes, dtype=np.int64).view(np.uint64) * weights
    return int(values.sum(dtype=np.uint64)) & _U64


def screened_checksum(checksum: str, bad: int, digest: int) -> str:
    """Return the checksum with the classification (unchanged without bad records)."""
    return checksum if bad == 0 else f"{checksum}+b{bad}.{digest & _U64:016x}"


class ScreenedPartition(ArrowPartition):
    """A write task's rows with the bad records taken out (read once, like the rows).

    :meth:`batches` yields the good rows (as the classifier returned them);
    :attr:`bad` holds the bad records afterwards; :meth:`summary` is the rows' summary with
    the classification folded in (a replay that only compares classifies too).
    """

    def __init__(self, rows: ArrowPartition, classifier: Classifier) -> None:
        super().__init__((), ordered=rows.ordered, batch_id=rows.batch_id)
        self._inner = rows
        self._classifier = classifier
        self.bad: list[pa.RecordBatch] = []
        self.bad_count = 0
        self._digest = 0
        self._screened: RowSummary | None = None
        self._read = False

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Yield the good rows of every batch; collect the bad ones."""
        self._read = True
        for batch in self._inner.batches():
            good, bad = self._classifier.classify(batch)
            if bad:
                records = bad_batch(batch, sorted(bad, key=lambda b: b.index))
                self.bad.append(records)
                self.bad_count += len(bad)
                self._digest = (self._digest + bad_digest(records)) & _U64
            if good.num_rows:
                yield good

    def summary(self) -> RowSummary:
        """Good rows and the checksum of all rows with their classification."""
        if self._screened is None:
            if not self._read:
                collections.deque(self.batches(), 0)  # a compare-only replay classifies too
            rows = self._inner.summary()
            checksum = screened_checksum(rows.checksum, self.bad_count, self._digest)
            self._screened = RowSummary(rows.rows - self.bad_count, checksum)
        return self._screened

    @property
    def total_rows(self) -> int:
        """Every row of the partition, good and bad."""
        return self._inner.summary().rows


class ScreeningParticipant(Participant[ArrowPartition]):
    """Delegates to a connector's participant; ``write`` screens the rows (module docstring).

    The wrapped participant must have ``write_dead_letters(records, context)`` (policy
    ``dead-letter``) and may have ``rejected_records()`` (rows it refused while writing).
    """

    def __init__(
        self,
        inner: Participant[ArrowPartition],
        classifier: Classifier,
        options: StageOptions,
        context: DeadLetterContext,
    ) -> None:
        self._inner = inner
        self._classifier = classifier
        self._options = options
        self._context = context
        self._marked: RowSummary | None = None  # the marker's summary, set by write

    def committed_marker(self) -> Marker | None:
        """Return the wrapped participant's marker."""
        return self._inner.committed_marker()

    def summarize(self, rows: ArrowPartition) -> RowSummary:
        """Classify without writing (a replay compared with the marker)."""
        return ScreenedPartition(rows, self._classifier).summary()

    def begin(self, epoch: int) -> None:
        """Begin the wrapped participant's epoch."""
        self._inner.begin(epoch)

    def write(self, rows: ArrowPartition) -> RowSummary:
        """Write the good rows, then dead-letter or skip the bad ones (same transaction).

        Returns the good rows' summary (the task's row count). The marker gets the
        screened rows' summary instead (:meth:`pre_commit`): rows the server rejected
        while writing count as rows there, since a replay that only compares
        (:meth:`summarize`) cannot know them.
        """
        screened = ScreenedPartition(rows, self._classifier)
        summary = self._inner.write(screened)
        self._marked = summary
        records = list(screened.bad)
        rejected = getattr(self._inner, "rejected_records", None)
        if rejected is not None:
            records += [r for r in rejected() if r.num_rows]
        count = sum(r.num_rows for r in records)
        if count:
            self._check_threshold(records, count, screened.total_rows)
            context = dataclasses.replace(self._context, batch_id=rows.batch_id)
            if self._options.on_bad_record == "dead-letter":
                self._inner.write_dead_letters(records, context)  # type: ignore[attr-defined]
                rows.dead_lettered += count
            else:
                _log_skipped(records, context)
                rows.skipped += count
        return RowSummary(screened.total_rows - count, summary.checksum)

    def _check_threshold(self, records: Sequence[pa.RecordBatch], bad: int, total: int) -> None:
        limit = self._options.max_bad_fraction
        if limit is None or bad <= limit * total:
            return
        ctx = self._context
        msg = (
            f"epoch {ctx.epoch} partition {ctx.partition} of sink {ctx.sink_id!r}: {bad} of "
            f"{total} rows are bad records, more than max_bad_fraction={limit} allows "
            f"({_classes(error_counts(records))}); fix the input or raise "
            "max_bad_fraction. The epoch was aborted."
        )
        raise StageError(msg, code=StageCode.BAD_RECORD_THRESHOLD)

    def pre_commit(self, summary: RowSummary) -> None:
        """Pre-commit the wrapped participant with the summary a replay recomputes."""
        self._inner.pre_commit(summary if self._marked is None else self._marked)

    def commit(self) -> None:
        """Commit the wrapped participant."""
        self._inner.commit()

    def abort(self) -> None:
        """Abort the wrapped participant."""
        self._inner.abort()

    def close(self) -> None:
        """Close the wrapped participant."""
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def error_counts(records: Sequence[pa.RecordBatch]) -> collections.Counter[str]:
    """Bad records per error class name."""
    counts: collections.Counter[str] = collections.Counter()
    for batch in records:
        counts.update(batch.column(batch.schema.get_field_index(ERROR_CLASS_COLUMN)).to_pylist())
    return counts


def _classes(counts: collections.Counter[str]) -> str:
    return ", ".join(f"{n} x {e}" for e, n in sorted(counts.items())) or "see the log"


def _log_skipped(records: Sequence[pa.RecordBatch], ctx: DeadLetterContext) -> None:
    """Log skipped records: one line each up to the cap, then the counts per class."""
    logged = 0
    for batch in records:
        errors = batch.column(batch.schema.get_field_index(ERROR_CLASS_COLUMN)).to_pylist()
        messages = batch.column(batch.schema.get_field_index(ERROR_MESSAGE_COLUMN)).to_pylist()
        for error, message in zip(errors, messages, strict=True):
            if logged < MAX_LOGGED_PER_TASK:
                log.warning(
                    "sink %s epoch %d partition %d: skipped a bad record (%s: %s)",
                    ctx.sink_id,
                    ctx.epoch,
                    ctx.partition,
                    error,
                    message,
                )
            logged += 1
    log.warning(
        "sink %s epoch %d partition %d: skipped %d bad record(s) (on_bad_record='skip'): %s",
        ctx.sink_id,
        ctx.epoch,
        ctx.partition,
        logged,
        _classes(error_counts(records)),
    )


def screened(
    participant: Participant[ArrowPartition],
    classifier: Classifier,
    options: StageOptions,
    context: DeadLetterContext,
) -> Participant[ArrowPartition]:
    """Return ``participant`` wrapped by the bad-record layer (unchanged with policy fail)."""
    if not options.screens_records:
        return participant
    return ScreeningParticipant(participant, classifier, options, context)
