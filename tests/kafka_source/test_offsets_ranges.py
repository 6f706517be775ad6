import json
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.kafka import KafkaCode, KafkaConnectorError
from connectors.kafka._source import KafkaInputPartition, KafkaOffsets, OffsetRange
from connectors.kafka._source._ranges import plan_ranges, rate_limit, split_ranges

topics = st.text(alphabet="abcxyz-_.09", min_size=1, max_size=8)
offset_maps = st.dictionaries(
    st.tuples(topics, st.integers(0, 50)), st.integers(0, 2**62), max_size=20
)


@given(offset_maps)
def test_offsets_json_round_trip(mapping: dict[tuple[str, int], int]) -> None:
    offsets = KafkaOffsets.from_mapping(mapping)
    text = offsets.to_json()
    assert KafkaOffsets.from_json(text) == offsets
    assert KafkaOffsets.from_json_dict(json.loads(text)).as_dict() == mapping
    assert pickle.loads(pickle.dumps(offsets)) == offsets


@given(offset_maps)
def test_offsets_json_is_canonical(mapping: dict[tuple[str, int], int]) -> None:
    shuffled = dict(reversed(list(mapping.items())))
    assert (
        KafkaOffsets.from_mapping(shuffled).to_json()
        == KafkaOffsets.from_mapping(mapping).to_json()
    )


def test_offsets_json_shape_matches_spark() -> None:
    offsets = KafkaOffsets.from_mapping({("t", 10): 5, ("t", 2): 23, ("a", 0): 0})
    assert offsets.to_json_dict() == {"a": {"0": 0}, "t": {"2": 23, "10": 5}}
    assert list(offsets.to_json_dict()["t"]) == ["2", "10"]  # numeric partition order


def test_checkpoint_offsets_reject_sentinels() -> None:
    with pytest.raises(
        KafkaConnectorError, match=">= 0", check=lambda e: e.code is KafkaCode.SOURCE_OPTION
    ):
        KafkaOffsets.from_json_dict({"t": {"0": -1}})
    with pytest.raises(
        KafkaConnectorError, match="integer", check=lambda e: e.code is KafkaCode.SOURCE_OPTION
    ):
        KafkaOffsets.from_json_dict({"t": {"0": "5"}})
    with pytest.raises(
        KafkaConnectorError, match="integer", check=lambda e: e.code is KafkaCode.SOURCE_OPTION
    ):
        KafkaOffsets.from_json_dict({"t": {"0": True}})


def test_range_and_partition_pickle_round_trip() -> None:
    rng = OffsetRange(topic="orders", partition=3, start=10, end=20)
    part = KafkaInputPartition(rng)
    assert pickle.loads(pickle.dumps(rng)) == rng
    clone = pickle.loads(pickle.dumps(part))
    assert clone == part and clone.offset_range.size == 10
    from pyspark import cloudpickle  # what Spark uses to ship partitions to tasks

    assert cloudpickle.loads(cloudpickle.dumps(part)) == part


# ---- plan_ranges ---------------------------------------------------------------------


def test_plan_ranges_normal_and_empty() -> None:
    start = {("t", 0): 5, ("t", 1): 7}
    end = {("t", 0): 9, ("t", 1): 7}
    assert plan_ranges(start, end, {}, fail_on_data_loss=True) == [
        OffsetRange(topic="t", partition=0, start=5, end=9)
    ]


def test_new_partition_starts_at_zero() -> None:
    ranges = plan_ranges({("t", 0): 5}, {("t", 0): 5, ("t", 1): 3}, {}, fail_on_data_loss=True)
    assert ranges == [OffsetRange(topic="t", partition=1, start=0, end=3)]


def test_deleted_offsets_fail_or_skip() -> None:
    start, end, earliest = {("t", 0): 2}, {("t", 0): 10}, {("t", 0): 6}
    with pytest.raises(
        KafkaConnectorError,
        match=r"offsets \[2,6\) were deleted.*failOnDataLoss",
        check=lambda e: e.code is KafkaCode.DATA_LOSS,
    ):
        plan_ranges(start, end, earliest, fail_on_data_loss=True)
    assert plan_ranges(start, end, earliest, fail_on_data_loss=False) == [
        OffsetRange(topic="t", partition=0, start=6, end=10)
    ]
    # everything in the range is gone: the range disappears
    assert plan_ranges(start, end, {("t", 0): 12}, fail_on_data_loss=False) == []


def test_new_partition_with_deleted_head_is_data_loss() -> None:
    with pytest.raises(KafkaConnectorError, check=lambda e: e.code is KafkaCode.DATA_LOSS):
        plan_ranges({}, {("t", 0): 10}, {("t", 0): 4}, fail_on_data_loss=True)


def test_offsets_going_backwards_and_vanished_partitions() -> None:
    with pytest.raises(
        KafkaConnectorError,
        match="below the planned start",
        check=lambda e: e.code is KafkaCode.DATA_LOSS,
    ):
        plan_ranges({("t", 0): 10}, {("t", 0): 3}, {}, fail_on_data_loss=True)
    assert plan_ranges({("t", 0): 10}, {("t", 0): 3}, {}, fail_on_data_loss=False) == []
    with pytest.raises(
        KafkaConnectorError, match="no longer exists", check=lambda e: e.code is KafkaCode.DATA_LOSS
    ):
        plan_ranges({("gone", 0): 1}, {}, {}, fail_on_data_loss=True)
    assert plan_ranges({("gone", 0): 1}, {}, {}, fail_on_data_loss=False) == []


# ---- rate_limit --------------------------------------------------------------------


def test_rate_limit_shares_by_lag() -> None:
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 300, ("t", 1): 200}
    end = rate_limit(start, latest, 100)
    assert end == {("t", 0): 75, ("t", 1): 125}


def test_rate_limit_no_cap_needed_and_tiny_share() -> None:
    assert rate_limit({("t", 0): 0}, {("t", 0): 5}, 10) == {("t", 0): 5}
    end = rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1}, 10)
    assert end[("t", 1)] == 1  # a lagging partition always moves


@given(
    st.dictionaries(st.integers(0, 8), st.tuples(st.integers(0, 1000), st.integers(0, 1000))),
    st.integers(1, 500),
)
def test_rate_limit_invariants(parts: dict[int, tuple[int, int]], limit: int) -> None:
    start = {("t", p): min(a, b) for p, (a, b) in parts.items()}
    latest = {("t", p): max(a, b) for p, (a, b) in parts.items()}
    end = rate_limit(start, latest, limit)
    assert set(end) == set(latest)
    for tp in latest:
        assert start[tp] <= end[tp] <= latest[tp]
    lagging = [tp for tp in latest if latest[tp] > start[tp]]
    taken = sum(end[tp] - start[tp] for tp in latest)
    assert taken == min(limit, sum(latest[tp] - start[tp] for tp in latest))
    if limit >= len(lagging):
        assert all(end[tp] > start[tp] for tp in lagging)  # nobody starves


# ---- split_ranges ------------------------------------------------------------------


def test_split_ranges_proportional() -> None:
    ranges = [
        OffsetRange(topic="t", partition=0, start=0, end=100),
        OffsetRange(topic="t", partition=1, start=0, end=300),
    ]
    out = split_ranges(ranges, 4)
    assert [r.size for r in out] == [100, 100, 100, 100]
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 2) == ranges


def test_split_never_makes_empty_pieces() -> None:
    out = split_ranges([OffsetRange(topic="t", partition=0, start=10, end=13)], 10)
    assert out == [
        OffsetRange(topic="t", partition=0, start=10, end=11),
        OffsetRange(topic="t", partition=0, start=11, end=12),
        OffsetRange(topic="t", partition=0, start=12, end=13),
    ]


@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 5_000)), min_size=1, max_size=6),
    st.integers(1, 64),
)
def test_split_covers_exactly(spec: list[tuple[int, int]], min_partitions: int) -> None:
    ranges = [
        OffsetRange(topic="t", partition=i, start=lo, end=lo + size)
        for i, (lo, size) in enumerate(spec)
    ]
    out = split_ranges(ranges, min_partitions)
    for r in ranges:
        pieces = [p for p in out if p.partition == r.partition]
        assert pieces[0].start == r.start and pieces[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:], strict=False))
        assert all(p.size > 0 for p in pieces)
    if len(ranges) < min_partitions:
        assert len(out) >= len(ranges)


def test_max_records_per_partition_cuts_large_ranges_only() -> None:
    ranges = [
        OffsetRange(topic="t", partition=0, start=0, end=25),
        OffsetRange(topic="t", partition=1, start=5, end=15),
    ]
    out = split_ranges(ranges, None, 10)
    assert [(r.partition, r.start, r.end) for r in out] == [
        (0, 0, 9),
        (0, 9, 17),
        (0, 17, 25),
        (1, 5, 15),  # exactly the maximum: one range
    ]


def test_max_records_then_min_partitions_as_in_spark() -> None:
    # ceil(100 / 60) = 2 ranges by maxRecordsPerPartition; fewer than minPartitions=4,
    # so they are split again by minPartitions.
    out = split_ranges([OffsetRange(topic="t", partition=0, start=0, end=100)], 4, 60)
    assert [r.size for r in out] == [25, 25, 25, 25]
    # Enough ranges by maxRecordsPerPartition already: minPartitions changes nothing.
    assert [
        r.size for r in split_ranges([OffsetRange(topic="t", partition=0, start=0, end=100)], 2, 30)
    ] == [
        25,
        25,
        25,
        25,
    ]


@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 5_000)), min_size=1, max_size=6),
    st.one_of(st.none(), st.integers(1, 64)),
    st.integers(1, 3_000),
)
def test_max_records_bounds_every_piece(
    spec: list[tuple[int, int]], min_partitions: int | None, max_records: int
) -> None:
    ranges = [
        OffsetRange(topic="t", partition=i, start=lo, end=lo + size)
        for i, (lo, size) in enumerate(spec)
    ]
    out = split_ranges(ranges, min_partitions, max_records)
    assert all(0 < p.size <= max_records for p in out)
    for r in ranges:
        pieces = [p for p in out if p.partition == r.partition]
        assert pieces[0].start == r.start and pieces[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:], strict=False))
