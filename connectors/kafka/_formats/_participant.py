"""The formats' hook on the Kafka participant: rows encoded before the writer sees them.

:func:`formatted` wraps the participant that ``KafkaResource.open`` made; its ``write``
hands the writer an :class:`EncodedPartition`, whose batches have the formatted key/value
columns as framed bytes (``_encode``). Everything else is the wrapped participant's: the
protocol, the marker, and the checksum (computed by the stage over the input columns, so a
replay compares the same rows whatever the bytes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from connectors.kafka._formats._encode import BatchEncoder
from connectors.kafka._formats._plan import FormatPlan
from connectors.stage import ArrowPartition
from txn import Marker, Participant, RowSummary


class EncodedPartition(ArrowPartition):
    """A write task's rows with the formatted columns encoded (read once, like the rows)."""

    def __init__(self, rows: ArrowPartition, encoder: BatchEncoder) -> None:
        super().__init__((), ordered=rows.ordered)
        self._inner = rows
        self._encoder = encoder

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Yield the rows' batches, encoded."""
        return map(self._encoder.encode, self._inner.batches())

    def summary(self) -> RowSummary:
        """Return the rows' own summary (over the input columns)."""
        return self._inner.summary()


class FormattedParticipant(Participant[ArrowPartition]):
    """Delegates to the Kafka participant; ``write`` encodes the formatted columns first."""

    def __init__(self, inner: Participant[ArrowPartition], plan: FormatPlan) -> None:
        self._inner = inner
        self._encoder = BatchEncoder(plan)

    def committed_marker(self) -> Marker | None:
        """Return the wrapped participant's marker."""
        return self._inner.committed_marker()

    def summarize(self, rows: ArrowPartition) -> RowSummary:
        """Summarize without encoding (nothing is written)."""
        return self._inner.summarize(rows)

    def begin(self, epoch: int) -> None:
        """Begin the wrapped participant's epoch."""
        self._inner.begin(epoch)

    def write(self, rows: ArrowPartition) -> RowSummary:
        """Write the rows with their formatted columns encoded."""
        return self._inner.write(EncodedPartition(rows, self._encoder))

    def pre_commit(self, summary: RowSummary) -> None:
        """Pre-commit the wrapped participant."""
        self._inner.pre_commit(summary)

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


def formatted(participant: Participant[ArrowPartition], plan: FormatPlan | None) -> Any:
    """Return ``participant``, wrapped to encode the formatted columns when ``plan`` has any."""
    return participant if plan is None else FormattedParticipant(participant, plan)
