"""Resume from the output: where a new query's input starts, and the check of its first batch.

A sink with ``resume="from-output"`` (docs/operations.md, "Changing a query") binds a new
query (a new checkpoint) to its epoch log like ``start_over``, but only once:

1. every epoch in doubt is settled (``txn._settle.settle_in_doubt``: committed or aborted by its
   markers, else :class:`txn.TxnCode.EPOCH_UNRESOLVED`);
2. the resume point is the ``end`` of the last committed epoch's input, or the ``start``
   of an aborted last epoch (nothing of it is visible) that the new query takes over;
3. the new query's first batch must start exactly there on every partition the log
   knows, read the same topics, and start new partitions of those topics at their
   beginning; anything else is refused before anything is planned or written.

:func:`starting_offsets` gives the ``startingOffsets`` JSON for the source.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connectors.stage._binding import start_over_offset
from connectors.stage._errors import StageCode, StageError
from txn import EpochHistory, EpochLog, EpochState, InputOffsets, Resource, TxnCode, TxnError
from txn._offsets import Positions, TopicPartition, offsets_json
from txn._settle import settle_in_doubt

_log = logging.getLogger("connectors.stage.resume")

RESUME_FROM_OUTPUT = "from-output"
RESUME_CHOICES = (RESUME_FROM_OUTPUT,)
EARLIEST = -2  # startingOffsets' sentinel for "the beginning of the partition"


@dataclass(frozen=True)
class ResumePoint:
    """Where the input continues after the committed output: the next offset per partition.

    ``EARLIEST`` (-2) for a partition that an aborted epoch began reading at its beginning.
    """

    sink_id: str
    epoch: int  # the epoch whose input bounds the point (last committed, or aborted last)
    positions: Positions

    def as_map(self) -> dict[TopicPartition, int]:
        """``{(topic, partition): next offset}``."""
        return {(t, p): o for t, p, o in self.positions}

    def topics(self) -> frozenset[str]:
        """Topics the output was written from."""
        return frozenset(t for t, _, _ in self.positions)


def resume_point(history: EpochHistory) -> ResumePoint:
    """Return where the input continues (module step 2); settle epochs in doubt first.

    Raises:
        TxnCode.EPOCH_UNRESOLVED: an epoch is still in doubt.
        StageCode.NOT_KAFKA_INPUT: no committed epoch recorded Kafka-only input offsets.

    """
    doubtful = history.in_doubt()
    if doubtful:
        msg = f"epoch {doubtful[0].epoch} of sink {history.sink_id!r} is in doubt; settle it first"
        raise TxnError(msg, code=TxnCode.EPOCH_UNRESOLVED)
    return committed_point(history)


def committed_point(history: EpochHistory) -> ResumePoint:
    """Return where the committed output's input ends, ignoring epochs in doubt (read-only).

    Raises:
        StageCode.NOT_KAFKA_INPUT: no committed epoch recorded Kafka-only input offsets.

    """
    sink_id = history.sink_id
    top = history.max_epoch()
    aborted = history.plan(top) if top is not None else None
    if aborted is not None and history.state(aborted.epoch) is EpochState.ABORTED:
        offsets = aborted.input
        if offsets is not None and offsets.kafka_only:  # a partition its start lacks began
            began = {(t, p): EARLIEST for t, p, _ in offsets.end} | offsets.start_map()
            positions = tuple((t, p, o) for (t, p), o in sorted(began.items()))
            return ResumePoint(sink_id, aborted.epoch, positions)
    plan = history.last_committed_plan()
    if plan is None:
        msg = (
            f"sink {sink_id!r} has no committed epoch whose input is known: nothing to resume "
            "from (start the new query from the old query's startingOffsets)"
        )
        raise StageError(msg, code=StageCode.NOT_KAFKA_INPUT)
    _require_kafka(sink_id, plan.epoch, plan.input)
    assert plan.input is not None  # noqa: S101 - _require_kafka checked it
    return ResumePoint(sink_id, plan.epoch, plan.input.end)


def _require_kafka(sink_id: str, epoch: int, offsets: InputOffsets | None) -> None:
    if offsets is None:
        why = (
            "recorded no input offsets (its query did not read Kafka, ran under Spark "
            "Connect, or was written by a release before input offsets were recorded)"
        )
    elif offsets.other_sources:
        why = f"read {offsets.other_sources} streaming source(s) other than Kafka"
    elif not offsets.end:
        why = "read no Kafka source"
    else:
        return
    msg = (
        f"sink {sink_id!r} cannot resume from its output: its last committed epoch {epoch} {why}. "
        "Resuming needs a query that reads only Kafka (kafka-rc or Spark's kafka source)"
    )
    raise StageError(msg, code=StageCode.NOT_KAFKA_INPUT)


def starting_offsets(
    point: ResumePoint, partitions: Mapping[str, int] | None = None
) -> dict[str, dict[str, int]]:
    """Return the ``startingOffsets`` JSON object that starts right after the output.

    ``partitions``: the current partition count of every topic the new query reads (None:
    only the partitions the log knows). Partitions added since are started at their
    beginning (``-2``, earliest): none of their records was written.

    Raises:
        StageCode.RESUME_INPUT_MISMATCH: the topics differ, or a known partition is gone.

    """
    positions: dict[TopicPartition, int] = point.as_map()
    if partitions is None:
        return offsets_json(positions)
    _check_topics(point, frozenset(partitions))
    gone = sorted(tp for tp in positions if tp[1] >= partitions[tp[0]])
    if gone:
        msg = f"sink {point.sink_id!r}: partitions {_names(gone)} of the output's input are gone"
        raise StageError(msg, code=StageCode.RESUME_INPUT_MISMATCH)
    out: dict[TopicPartition, int] = dict(positions)
    for topic, count in partitions.items():
        for partition in range(count):
            out.setdefault((topic, partition), EARLIEST)
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(out.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def check_resumed_batch(point: ResumePoint, batch: InputOffsets | None) -> None:
    """Refuse a new query's first batch that does not start at ``point`` (module step 3).

    Raises:
        StageCode.NOT_KAFKA_INPUT: the batch's offsets are unknown or not only Kafka's.
        StageCode.RESUME_INPUT_MISMATCH: other topics, a missing partition, or another start
            (each named with both offsets).

    """
    sink = point.sink_id
    if batch is None or not batch.kafka_only:
        what = "could not be read" if batch is None else "are not only Kafka's"
        msg = (
            f"sink {sink!r} resumes from its output, but the new query's input offsets {what} "
            "(resume needs a classic Spark session and a query reading only Kafka)"
        )
        raise StageError(msg, code=StageCode.NOT_KAFKA_INPUT)
    _check_topics(point, batch.topics())
    starts, ends = batch.start_map(), batch.end_map()
    wrong = []
    for tp, offset in sorted(point.as_map().items()):
        if tp not in ends:
            wrong.append(f"{_names([tp])} is not read")
        elif offset != EARLIEST and starts.get(tp) != offset:
            wrong.append(f"{_names([tp])} starts at {starts.get(tp)}, the output ends at {offset}")
    if wrong:
        msg = (
            f"sink {sink!r} resumes from its output after epoch {point.epoch}, but the new "
            f"query's first batch does not start there: {'; '.join(wrong)}. Start the source "
            "with startingOffsets from connectors.kafka.resume_offsets(sink, ...)"
        )
        raise StageError(msg, code=StageCode.RESUME_INPUT_MISMATCH)
    late = sorted(tp for tp in ends if tp not in point.as_map() and starts.get(tp, 0) > 0)
    if late:
        _log.warning(
            "sink %s: partitions %s are new since the output's last epoch and start after "
            "offset 0 (their earliest offset, if retention deleted the beginning)",
            sink,
            _names(late),
        )


def bind_resumed(log: EpochLog, resource: Resource[Any], batch: InputOffsets | None) -> int:
    """Settle the log, check the new query's first batch; return its epoch offset (steps 1-3).

    Call after ``Coordinator.recover`` (which finishes what a coordinator can complete).
    """
    settled = settle_in_doubt(log, resource)
    if settled.committed or settled.aborted:
        _log.warning("sink %s settled epochs for a resumed query: %s", log.sink_id, settled)
    history = log.load()
    check_resumed_batch(resume_point(history), batch)
    return start_over_offset(history)


def _check_topics(point: ResumePoint, topics: frozenset[str]) -> None:
    known = point.topics()
    if topics != known:
        missing, extra = sorted(known - topics), sorted(topics - known)
        msg = (
            f"sink {point.sink_id!r}: the new query reads topics {sorted(topics)}, but the "
            f"output was written from {sorted(known)} (not read now: {missing}; new: {extra}); "
            "resuming needs the same topics (use a new sink_id for another input)"
        )
        raise StageError(msg, code=StageCode.RESUME_INPUT_MISMATCH)


def _names(tps: list[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)
