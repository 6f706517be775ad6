"""The pure part of the checker: compare input, output views and the raw log; list anomalies.

No I/O here, so unit tests can feed synthetic records. Checks, in order:

1. views agree: every ``read_committed`` record exists in the ``read_uncommitted`` view at the
   same position with the same key and value;
2. raw log vs. ``read_committed``: no record the log marks aborted or open is visible
   (``aborted_read``), and every committed or non-transactional record is (``hidden_committed``);
3. open transactions: no transactional batch without a marker, and LSO == high watermark;
4. exactly once: every input id appears once in the committed output (``lost``,
   ``duplicate``; a duplicate whose copies share a producer id with different producer epochs
   is a ``zombie_commit``: a fenced attempt's data became visible), and no output id is
   unknown to the input (``unknown``); with dead letters (the records a sink's
   ``on_bad_record="dead-letter"`` sent to its dead-letter topic), every input id is in the
   output or among the dead letters, once: a dead letter twice is a ``duplicate``, an id
   both written and dead-lettered is ``dead_lettered_and_written``;
5. per-key order: within each (key, output partition) the first copies follow the input order
   of that key (per input partition).
"""

from __future__ import annotations

import bisect
import enum
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from connectors.verify._records import IdentityFn, Record, RecordIdentity
from connectors.verify._wire import BatchSpan, PartitionScan

# Anomalies kept per kind in a report (the counts always cover all of them).
MAX_EXAMPLES_PER_KIND = 20


class AnomalyKind(str, enum.Enum):
    """Kinds of exactly-once violations the checker can find."""

    LOST = "lost"
    DUPLICATE = "duplicate"
    ZOMBIE_COMMIT = "zombie_commit"
    UNKNOWN = "unknown"
    REORDERED = "reordered"
    ABORTED_READ = "aborted_read"
    HIDDEN_COMMITTED = "hidden_committed"
    VIEW_MISMATCH = "view_mismatch"
    OPEN_TRANSACTION = "open_transaction"
    EPOCH_LOG_MISMATCH = "epoch_log_mismatch"
    IN_DOUBT_EPOCH = "in_doubt_epoch"
    STALE_ROW = "stale_row"  # tables only: a key's row is not its last change
    DEAD_LETTERED_AND_WRITTEN = "dead_lettered_and_written"  # in the output and dead-lettered


# The anomaly kinds a topic check can report, in report order.
TOPIC_KINDS = tuple(k for k in AnomalyKind if k is not AnomalyKind.STALE_ROW)


@dataclass(frozen=True, kw_only=True)
class Anomaly:
    """One violation, with the record and position it concerns when there is one."""

    kind: AnomalyKind
    detail: str
    record_id: str | None = None
    partition: int | None = None
    offset: int | None = None


class _Counted:
    """What every report answers from its ``anomaly_counts`` and ``examples`` fields."""

    anomaly_counts: Mapping[AnomalyKind, int]
    examples: tuple[Anomaly, ...]

    @property
    def ok(self) -> bool:
        """True iff no anomaly of any kind was found."""
        return not any(self.anomaly_counts.values())

    def count(self, kind: AnomalyKind) -> int:
        """Return the number of anomalies of ``kind``."""
        return self.anomaly_counts.get(kind, 0)

    def anomalies(self, kind: AnomalyKind) -> tuple[Anomaly, ...]:
        """Return the recorded examples of ``kind`` (at most ``MAX_EXAMPLES_PER_KIND``)."""
        return tuple(a for a in self.examples if a.kind is kind)


@dataclass(frozen=True, kw_only=True)
class CheckReport(_Counted):
    """Outcome of one exactly-once check; ``ok`` is true iff no anomaly was found."""

    input_records: int
    committed_records: int
    uncommitted_records: int
    aborted_records: int
    output_partitions: int
    commit_markers: int
    abort_markers: int
    anomaly_counts: Mapping[AnomalyKind, int]
    examples: tuple[Anomaly, ...]
    notes: tuple[str, ...] = ()
    epoch_log_checked: bool = False
    last_committed_epoch: int | None = None
    dead_letter_records: int = 0


@dataclass
class _Collector:
    counts: dict[AnomalyKind, int] = field(default_factory=lambda: dict.fromkeys(AnomalyKind, 0))
    examples: list[Anomaly] = field(default_factory=list)

    def add(self, anomaly: Anomaly) -> None:
        self.counts[anomaly.kind] += 1
        if self.counts[anomaly.kind] <= MAX_EXAMPLES_PER_KIND:
            self.examples.append(anomaly)


@dataclass(frozen=True)
class _Producer:
    producer_id: int
    producer_epoch: int


def analyze(
    inputs: Sequence[Record],
    committed: Sequence[Record],
    uncommitted: Sequence[Record],
    *,
    scans: Mapping[int, PartitionScan],
    committed_ends: Mapping[int, int],
    identity: IdentityFn,
    extra: Sequence[Anomaly] = (),
    notes: Sequence[str] = (),
    epoch_log_checked: bool = False,
    last_committed_epoch: int | None = None,
    dead_letters: Sequence[Record] = (),
) -> CheckReport:
    """Run checks 1-5 of the module docstring and return the report.

    ``scans`` is the raw log per output partition; ``committed_ends`` the last stable offset
    per output partition as ListOffsets reported it; ``extra`` anomalies found elsewhere (the
    epoch log check) are merged into the report; ``dead_letters`` the committed records of
    the sink's dead-letter topic (identified as the input is).
    """
    found = _Collector()
    for anomaly in extra:
        found.add(anomaly)
    _check_views(committed, uncommitted, found)
    _check_raw_log(committed, scans, found)
    _check_open(scans, committed_ends, found)
    in_ids = [identity(r) for r in inputs]
    out_ids = [identity(r) for r in committed]
    dead_ids = [identity(r) for r in dead_letters]
    _check_exactly_once(in_ids, committed, out_ids, scans, found, dead_ids)
    _check_dead_letters(in_ids, out_ids, dead_ids, found)
    _check_order(inputs, in_ids, committed, out_ids, found)
    committed_pos = {(r.partition, r.offset) for r in committed}
    return CheckReport(
        input_records=len(inputs),
        committed_records=len(committed),
        uncommitted_records=len(uncommitted),
        aborted_records=sum(1 for r in uncommitted if (r.partition, r.offset) not in committed_pos),
        output_partitions=len(scans),
        commit_markers=sum(s.commit_markers for s in scans.values()),
        abort_markers=sum(s.abort_markers for s in scans.values()),
        anomaly_counts=dict(found.counts),
        examples=tuple(found.examples),
        notes=tuple(notes),
        epoch_log_checked=epoch_log_checked,
        last_committed_epoch=last_committed_epoch,
        dead_letter_records=len(dead_letters),
    )


def _check_views(
    committed: Sequence[Record], uncommitted: Sequence[Record], found: _Collector
) -> None:
    by_pos = {(r.partition, r.offset): r for r in uncommitted}
    for rec in committed:
        other = by_pos.get((rec.partition, rec.offset))
        if other is None or (other.key, other.value) != (rec.key, rec.value):
            found.add(
                Anomaly(
                    kind=AnomalyKind.VIEW_MISMATCH,
                    detail="read_committed shows a record the read_uncommitted view does not have "
                    "at that position",
                    partition=rec.partition,
                    offset=rec.offset,
                )
            )


class _SpanIndex:
    """Offset -> batch span lookup for one partition."""

    def __init__(self, spans: Sequence[BatchSpan]) -> None:
        self._spans = sorted(spans, key=lambda s: s.first)
        self._firsts = [s.first for s in self._spans]

    def find(self, offset: int) -> BatchSpan | None:
        i = bisect.bisect_right(self._firsts, offset) - 1
        if i >= 0 and self._spans[i].last >= offset:
            return self._spans[i]
        return None


def _check_raw_log(
    committed: Sequence[Record], scans: Mapping[int, PartitionScan], found: _Collector
) -> None:
    visible_pos = {(r.partition, r.offset) for r in committed}
    for pid, scan in scans.items():
        hidden = _SpanIndex(scan.aborted + scan.open)
        for rec in (r for r in committed if r.partition == pid):
            span = hidden.find(rec.offset)
            if span is not None:
                found.add(
                    Anomaly(
                        kind=AnomalyKind.ABORTED_READ,
                        detail=f"read_committed returned a record of producer {span.producer_id} "
                        f"epoch {span.producer_epoch} whose transaction is "
                        f"{'aborted' if span in scan.aborted else 'open'} in the log",
                        partition=pid,
                        offset=rec.offset,
                    )
                )
        for span in scan.committed + scan.non_transactional:
            if span.last >= scan.last_stable_offset:
                continue
            missing = [o for o in range(span.first, span.last + 1) if (pid, o) not in visible_pos]
            for offset in missing:
                found.add(
                    Anomaly(
                        kind=AnomalyKind.HIDDEN_COMMITTED,
                        detail="the log holds committed data here that read_committed did not return",
                        partition=pid,
                        offset=offset,
                    )
                )


def _check_open(
    scans: Mapping[int, PartitionScan], committed_ends: Mapping[int, int], found: _Collector
) -> None:
    for pid, scan in sorted(scans.items()):
        for span in scan.open:
            found.add(
                Anomaly(
                    kind=AnomalyKind.OPEN_TRANSACTION,
                    detail=f"producer {span.producer_id} epoch {span.producer_epoch} has a transaction "
                    f"with no commit/abort marker (offsets {span.first}..{span.last})",
                    partition=pid,
                    offset=span.first,
                )
            )
        lso = committed_ends.get(pid, scan.last_stable_offset)
        if lso != scan.high_watermark or scan.last_stable_offset != scan.high_watermark:
            found.add(
                Anomaly(
                    kind=AnomalyKind.OPEN_TRANSACTION,
                    detail=f"last stable offset {lso} (fetch: {scan.last_stable_offset}) is below the "
                    f"high watermark {scan.high_watermark}: a transaction is still open",
                    partition=pid,
                )
            )


def _check_exactly_once(
    in_ids: Sequence[RecordIdentity],
    committed: Sequence[Record],
    out_ids: Sequence[RecordIdentity],
    scans: Mapping[int, PartitionScan],
    found: _Collector,
    dead_ids: Sequence[RecordIdentity] = (),
) -> None:
    expected = {i.id for i in in_ids}
    dead = {i.id for i in dead_ids}
    copies: dict[str, list[Record]] = defaultdict(list)
    for rec, ident in zip(committed, out_ids, strict=True):
        copies[ident.id].append(rec)
    for ident in in_ids:
        if ident.id not in copies and ident.id not in dead:
            found.add(
                Anomaly(
                    kind=AnomalyKind.LOST,
                    detail="input record missing from the committed output"
                    + (" and the dead letters" if dead_ids else ""),
                    record_id=ident.id,
                )
            )
    indexes = {pid: _SpanIndex(s.committed + s.non_transactional) for pid, s in scans.items()}
    for rid, recs in copies.items():
        if rid not in expected:
            found.add(
                Anomaly(
                    kind=AnomalyKind.UNKNOWN,
                    detail="output record id not in the input",
                    record_id=rid,
                    partition=recs[0].partition,
                    offset=recs[0].offset,
                )
            )
        if len(recs) > 1:
            found.add(_duplicate(rid, recs, indexes))


def _check_dead_letters(
    in_ids: Sequence[RecordIdentity],
    out_ids: Sequence[RecordIdentity],
    dead_ids: Sequence[RecordIdentity],
    found: _Collector,
) -> None:
    """Check 4 for the dead letters: each input id's only copy, never one the output has."""
    expected = {i.id for i in in_ids}
    written = {i.id for i in out_ids}
    letters = Counter(i.id for i in dead_ids)
    for rid, n in letters.items():
        if rid not in expected:
            found.add(
                Anomaly(
                    kind=AnomalyKind.UNKNOWN,
                    detail="dead letter id not in the input",
                    record_id=rid,
                )
            )
        if n > 1:
            found.add(
                Anomaly(
                    kind=AnomalyKind.DUPLICATE,
                    detail=f"{n} dead letters of this record",
                    record_id=rid,
                )
            )
        if rid in written:
            found.add(
                Anomaly(
                    kind=AnomalyKind.DEAD_LETTERED_AND_WRITTEN,
                    detail="the record is in the committed output and in the dead-letter topic",
                    record_id=rid,
                )
            )


def _duplicate(rid: str, recs: Sequence[Record], indexes: Mapping[int, _SpanIndex]) -> Anomaly:
    producers: list[_Producer] = []
    for rec in recs:
        index = indexes.get(rec.partition)
        span = index.find(rec.offset) if index is not None else None
        if span is not None:
            producers.append(_Producer(span.producer_id, span.producer_epoch))
    by_pid: dict[int, set[int]] = defaultdict(set)
    for prod in producers:
        by_pid[prod.producer_id].add(prod.producer_epoch)
    zombie = any(len(epochs) > 1 for epochs in by_pid.values())
    where = ", ".join(f"p{r.partition}@{r.offset}" for r in recs)
    if zombie:
        return Anomaly(
            kind=AnomalyKind.ZOMBIE_COMMIT,
            detail=f"{len(recs)} committed copies ({where}) written by different producer "
            "epochs of one transactional id: a fenced attempt committed",
            record_id=rid,
            partition=recs[-1].partition,
            offset=recs[-1].offset,
        )
    return Anomaly(
        kind=AnomalyKind.DUPLICATE,
        detail=f"{len(recs)} committed copies ({where})",
        record_id=rid,
        partition=recs[-1].partition,
        offset=recs[-1].offset,
    )


def _check_order(
    inputs: Sequence[Record],
    in_ids: Sequence[RecordIdentity],
    committed: Sequence[Record],
    out_ids: Sequence[RecordIdentity],
    found: _Collector,
) -> None:
    # Position of every input id in its key's sequence, per input partition.
    rank: dict[str, tuple[int, int]] = {}
    counters: dict[tuple[str, int], int] = defaultdict(int)
    for rec, ident in sorted(
        zip(inputs, in_ids, strict=True), key=lambda pair: (pair[0].partition, pair[0].offset)
    ):
        in_slot = (ident.key, rec.partition)
        rank[ident.id] = (rec.partition, counters[in_slot])
        counters[in_slot] += 1
    seen: set[str] = set()
    high: dict[tuple[str, int, int], tuple[int, str]] = {}
    for rec, ident in sorted(
        zip(committed, out_ids, strict=True), key=lambda pair: (pair[0].partition, pair[0].offset)
    ):
        if ident.id in seen or ident.id not in rank:
            continue  # duplicates and unknown ids are reported by the exactly-once check
        seen.add(ident.id)
        in_part, pos = rank[ident.id]
        slot = (ident.key, rec.partition, in_part)
        prev = high.get(slot)
        if prev is not None and pos < prev[0]:
            found.add(
                Anomaly(
                    kind=AnomalyKind.REORDERED,
                    detail=f"key {ident.key!r}: record {ident.id} follows record {prev[1]} in the output "
                    "but precedes it in the input",
                    record_id=ident.id,
                    partition=rec.partition,
                    offset=rec.offset,
                )
            )
        else:
            high[slot] = (pos, ident.id)
