"""Unit tests of the exactly-once checker's analysis on synthetic record lists (no Kafka).

Each test starts from a clean world that passes, then breaks exactly one invariant and
asserts that the checker reports it: a checker that cannot fail proves nothing.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field, replace

import pytest

from connectors.verify import (
    AnomalyKind,
    BatchSpan,
    CheckReport,
    PartitionScan,
    Record,
    RecordFormatError,
    analyze,
    check_epoch_log,
    json_identity,
    make_input_value,
)


@dataclass
class World:
    inputs: list[Record]
    committed: list[Record]
    uncommitted: list[Record]
    scans: dict[int, PartitionScan]
    ends: dict[int, int] = field(default_factory=dict)

    def check(self) -> CheckReport:
        ends = self.ends or {p: s.last_stable_offset for p, s in self.scans.items()}
        return analyze(
            self.inputs,
            self.committed,
            self.uncommitted,
            scans=self.scans,
            committed_ends=ends,
            identity=json_identity,
        )


def clean_world(n: int = 40, keys: int = 4, out_parts: int = 2) -> World:
    """n records with ids 0..n-1; output: one committed txn per record, then a marker."""
    inputs, committed = [], []
    seq = dict.fromkeys(range(keys), 0)
    next_off = dict.fromkeys(range(out_parts), 0)
    spans: dict[int, list[BatchSpan]] = {p: [] for p in range(out_parts)}
    for i in range(n):
        k = i % keys
        value = make_input_value(i, f"k{k}", seq[k])
        seq[k] += 1
        inputs.append(Record(topic="in", partition=0, offset=i, key=f"k{k}".encode(), value=value))
        p = k % out_parts
        off = next_off[p]
        committed.append(
            Record(topic="out", partition=p, offset=off, key=f"k{k}".encode(), value=value)
        )
        spans[p].append(
            BatchSpan(
                first=off, last=off, producer_id=1000 + p, producer_epoch=0, transactional=True
            )
        )
        next_off[p] = off + 2  # record + commit marker
    scans = {
        p: PartitionScan(
            partition=p,
            high_watermark=next_off[p],
            last_stable_offset=next_off[p],
            committed=tuple(spans[p]),
            commit_markers=len(spans[p]),
        )
        for p in range(out_parts)
    }
    return World(inputs, committed, list(committed), scans)


def test_clean_world_passes() -> None:
    report = clean_world().check()
    assert report.ok, report
    assert report.committed_records == report.input_records == 40
    assert report.aborted_records == 0


def test_flags_lost_record() -> None:
    w = clean_world()
    gone = w.committed.pop(7)
    w.uncommitted.remove(gone)
    report = w.check()
    assert not report.ok
    assert report.count(AnomalyKind.LOST) == 1
    assert report.anomalies(AnomalyKind.LOST)[0].record_id == "7"


def test_flags_duplicate_from_distinct_producers() -> None:
    w = clean_world()
    dup = w.committed[5]
    p = dup.partition
    hwm = w.scans[p].high_watermark
    copy = Record(topic="out", partition=p, offset=hwm, key=dup.key, value=dup.value)
    w.committed.append(copy)
    w.uncommitted.append(copy)
    scan = w.scans[p]
    w.scans[p] = replace(
        scan,
        high_watermark=hwm + 2,
        last_stable_offset=hwm + 2,
        committed=scan.committed
        + (BatchSpan(first=hwm, last=hwm, producer_id=4242, producer_epoch=0, transactional=True),),
    )
    report = w.check()
    assert report.count(AnomalyKind.DUPLICATE) == 1
    assert report.count(AnomalyKind.ZOMBIE_COMMIT) == 0
    assert report.anomalies(AnomalyKind.DUPLICATE)[0].record_id == "5"


def test_duplicate_from_older_producer_epoch_is_a_zombie_commit() -> None:
    w = clean_world()
    dup = w.committed[4]
    p = dup.partition
    hwm = w.scans[p].high_watermark
    copy = Record(topic="out", partition=p, offset=hwm, key=dup.key, value=dup.value)
    w.committed.append(copy)
    w.uncommitted.append(copy)
    scan = w.scans[p]
    # same producer id as the original copy (1000 + p), a different producer epoch
    w.scans[p] = replace(
        scan,
        high_watermark=hwm + 2,
        last_stable_offset=hwm + 2,
        committed=scan.committed
        + (
            BatchSpan(
                first=hwm, last=hwm, producer_id=1000 + p, producer_epoch=3, transactional=True
            ),
        ),
    )
    report = w.check()
    assert report.count(AnomalyKind.ZOMBIE_COMMIT) == 1
    assert not report.ok


def test_flags_reordering_within_a_key() -> None:
    w = clean_world()
    # records 0 and 4 share key k0 and output partition 0: swap their values
    a = next(i for i, r in enumerate(w.committed) if json_identity(r).id == "0")
    b = next(i for i, r in enumerate(w.committed) if json_identity(r).id == "4")
    ra, rb = w.committed[a], w.committed[b]
    w.committed[a] = replace(ra, value=rb.value)
    w.committed[b] = replace(rb, value=ra.value)
    w.uncommitted = list(w.committed)
    report = w.check()
    assert report.count(AnomalyKind.REORDERED) == 1
    assert report.count(AnomalyKind.LOST) == 0


def test_order_is_per_key_not_global() -> None:
    w = clean_world(keys=4, out_parts=1)
    # interleave keys differently: sort output by key then by offset; per-key order is kept
    ordered = sorted(w.committed, key=lambda r: (r.key, r.offset))
    w.committed = [replace(r, offset=i * 2) for i, r in enumerate(ordered)]
    w.uncommitted = list(w.committed)
    report = w.check()
    assert report.ok, report.examples


def test_flags_aborted_data_visible_to_read_committed() -> None:
    w = clean_world()
    p = 0
    scan = w.scans[p]
    hwm = scan.high_watermark
    # an aborted attempt wrote record 0 again at hwm; a broken reader returned it
    leaked = Record(
        topic="out", partition=p, offset=hwm, key=w.committed[0].key, value=w.committed[0].value
    )
    w.committed.append(leaked)
    w.uncommitted.append(leaked)
    w.scans[p] = replace(
        scan,
        high_watermark=hwm + 2,
        last_stable_offset=hwm + 2,
        aborted=(
            BatchSpan(first=hwm, last=hwm, producer_id=1000, producer_epoch=1, transactional=True),
        ),
        abort_markers=1,
    )
    report = w.check()
    assert report.count(AnomalyKind.ABORTED_READ) == 1
    assert not report.ok


def test_aborted_data_hidden_from_read_committed_is_fine() -> None:
    w = clean_world()
    p = 0
    scan = w.scans[p]
    hwm = scan.high_watermark
    aborted = Record(
        topic="out", partition=p, offset=hwm, key=w.committed[0].key, value=w.committed[0].value
    )
    w.uncommitted.append(aborted)
    w.scans[p] = replace(
        scan,
        high_watermark=hwm + 2,
        last_stable_offset=hwm + 2,
        aborted=(
            BatchSpan(first=hwm, last=hwm, producer_id=1000, producer_epoch=1, transactional=True),
        ),
        abort_markers=1,
    )
    report = w.check()
    assert report.ok, report.examples
    assert report.aborted_records == 1


def test_flags_open_transaction() -> None:
    w = clean_world()
    p = 1
    scan = w.scans[p]
    hwm = scan.high_watermark
    w.uncommitted.append(
        Record(
            topic="out", partition=p, offset=hwm, key=b"k1", value=make_input_value(999, "k1", 0)
        )
    )
    w.scans[p] = replace(
        scan,
        high_watermark=hwm + 1,
        last_stable_offset=hwm,
        open=(
            BatchSpan(first=hwm, last=hwm, producer_id=1001, producer_epoch=2, transactional=True),
        ),
    )
    report = w.check()
    # the open batch, and the LSO below the high watermark
    assert report.count(AnomalyKind.OPEN_TRANSACTION) == 2


def test_flags_committed_data_hidden_from_read_committed() -> None:
    w = clean_world()
    w.committed.pop(3)  # the log says committed; the reader did not return it
    report = w.check()
    assert report.count(AnomalyKind.HIDDEN_COMMITTED) == 1
    assert report.count(AnomalyKind.LOST) == 1


def test_flags_view_mismatch_and_unknown_ids() -> None:
    w = clean_world()
    bogus = Record(
        topic="out",
        partition=0,
        offset=w.committed[0].offset,
        key=b"k0",
        value=make_input_value(12345, "k0", 0),
    )
    w.committed[0] = bogus
    report = w.check()
    assert report.count(AnomalyKind.VIEW_MISMATCH) == 1
    assert report.count(AnomalyKind.UNKNOWN) == 1
    assert report.count(AnomalyKind.LOST) == 1


def test_bad_record_format_is_a_typed_error() -> None:
    with pytest.raises(RecordFormatError, match="record_identity"):
        json_identity(Record(topic="out", partition=0, offset=0, key=None, value=b"not json"))


@dataclass(frozen=True)
class FakePlan:
    epoch: int
    parallelism: int


@dataclass(frozen=True)
class FakeMarker:
    epoch: int
    rows: int


@dataclass
class FakeHistory:
    plans: dict[int, FakePlan]
    last: int | None
    doubt: list[FakePlan] = field(default_factory=list)

    def plan(self, epoch: int) -> FakePlan | None:
        return self.plans.get(epoch)

    def in_doubt(self) -> list[FakePlan]:
        return self.doubt

    def last_committed_epoch(self) -> int | None:
        return self.last

    def max_parallelism(self) -> int:
        return max((p.parallelism for p in self.plans.values()), default=0)


def test_epoch_log_agreeing_with_markers_passes() -> None:
    h = FakeHistory({1: FakePlan(1, 3), 2: FakePlan(2, 2)}, last=2)
    markers = {0: FakeMarker(2, 5), 1: FakeMarker(2, 0), 2: FakeMarker(1, 4)}
    assert check_epoch_log(h, markers) == []


def test_epoch_log_mismatches_are_flagged() -> None:
    h = FakeHistory({1: FakePlan(1, 2), 2: FakePlan(2, 2)}, last=2, doubt=[FakePlan(3, 2)])
    markers = {0: FakeMarker(1, 5), 1: None, 2: FakeMarker(7, 1)}
    kinds = [a.kind for a in check_epoch_log(h, markers)]
    assert kinds.count(AnomalyKind.IN_DOUBT_EPOCH) == 1
    # p0 behind, p1 missing, p2 names an epoch never planned
    assert kinds.count(AnomalyKind.EPOCH_LOG_MISMATCH) == 3
    assert check_epoch_log(FakeHistory({}, last=None), {0: FakeMarker(1, 1)})[0].kind is (
        AnomalyKind.EPOCH_LOG_MISMATCH
    )


def test_report_and_records_pickle_round_trip() -> None:
    report = clean_world().check()
    assert pickle.loads(pickle.dumps(report)) == report
    rec = Record(topic="t", partition=1, offset=2, key=b"k", value=b"v")
    assert pickle.loads(pickle.dumps(rec)) == rec
