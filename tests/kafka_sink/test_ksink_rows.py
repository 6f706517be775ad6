import random

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.kafka._rows import HASH_COLUMN, ArrowPartition, combine_hashes, format_checksum

int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def batches_of(hashes, cuts):
    """Split ``hashes`` into record batches at the sorted positions ``cuts``."""
    out, start = [], 0
    for cut in [*sorted(cuts), len(hashes)]:
        part = hashes[start:cut]
        out.append(pa.record_batch({"value": [str(h) for h in part],
                                    HASH_COLUMN: pa.array(part, pa.int64())}))
        start = cut
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(int64s, max_size=60), st.randoms(use_true_random=False), st.data())
def test_checksum_does_not_depend_on_order_or_batching(hashes, rnd, data):
    shuffled = list(hashes)
    rnd.shuffle(shuffled)
    cuts_a = data.draw(st.lists(st.integers(0, len(hashes)), max_size=4))
    cuts_b = data.draw(st.lists(st.integers(0, len(hashes)), max_size=4))
    a = ArrowPartition(batches_of(hashes, cuts_a)).summary()
    b = ArrowPartition(batches_of(shuffled, cuts_b)).summary()
    assert a == b
    assert a.rows == len(hashes)


@settings(max_examples=60, deadline=None)
@given(st.lists(int64s, max_size=40), st.data())
def test_ordered_checksum_depends_on_order_but_not_on_batching(hashes, data):
    cuts_a = data.draw(st.lists(st.integers(0, len(hashes)), max_size=4))
    cuts_b = data.draw(st.lists(st.integers(0, len(hashes)), max_size=4))
    a = ArrowPartition(batches_of(hashes, cuts_a), ordered=True).summary()
    b = ArrowPartition(batches_of(hashes, cuts_b), ordered=True).summary()
    assert a == b


def test_ordered_checksum_detects_a_swap():
    hashes = [11, 22, 33]
    a = ArrowPartition(batches_of(hashes, []), ordered=True).summary()
    b = ArrowPartition(batches_of([22, 11, 33], []), ordered=True).summary()
    assert a.rows == b.rows and a.checksum != b.checksum
    u = ArrowPartition(batches_of(hashes, []), ordered=False).summary()
    assert u.checksum != a.checksum  # the prefix says which combination was used


def test_checksum_is_sum_mod_2_64():
    values = [2**63 - 1, 2**63 - 1, 5, -3]
    expected = sum(v % 2**64 for v in values) % 2**64
    assert combine_hashes(pa.array(values, pa.int64()), ordered=False) == expected
    assert format_checksum(expected, ordered=False) == f"u{expected:016x}"


def test_content_change_changes_checksum():
    a = ArrowPartition(batches_of([1, 2, 3], [])).summary()
    b = ArrowPartition(batches_of([1, 2, 4], [])).summary()
    c = ArrowPartition(batches_of([1, 2], [])).summary()
    assert a.checksum != b.checksum
    assert a != c


def test_spills_beyond_threshold_and_replays_the_same_batches(tmp_path):
    rng = random.Random(7)
    hashes = [rng.randrange(-(2**63), 2**63) for _ in range(5000)]
    source = batches_of(hashes, list(range(250, 5000, 250)))
    part = ArrowPartition(iter(source), spill_dir=str(tmp_path), spill_threshold=4096)
    summary = part.summary()
    assert list(tmp_path.iterdir()), "the partition should have spilled to a file"
    for _ in range(2):  # re-iterable
        replay = list(part.batches())
        assert pa.Table.from_batches(replay).equals(pa.Table.from_batches(source))
    assert summary == ArrowPartition(source).summary()
    part.close()
    assert not list(tmp_path.iterdir()), "close() removes the spill file"


def test_small_partition_stays_in_memory(tmp_path):
    source = batches_of([1, 2, 3], [1])
    part = ArrowPartition(iter(source), spill_dir=str(tmp_path))
    part.summary()
    assert not list(tmp_path.iterdir())
    assert sum(b.num_rows for b in part.batches()) == 3


def test_streaming_before_summary_computes_it_on_the_way():
    source = batches_of([5, 6, 7, 8], [2])
    part = ArrowPartition(iter(source))
    assert sum(b.num_rows for b in part.batches()) == 4
    assert part.summary() == ArrowPartition(source).summary()


def test_empty_partition():
    s = ArrowPartition(iter([])).summary()
    assert s.rows == 0 and s.checksum == format_checksum(0, ordered=False)
    assert np.uint64(0) == 0


def test_summary_without_keeping_holds_nothing(tmp_path):
    source = batches_of(list(range(100)), [10, 50])
    part = ArrowPartition(iter(source), spill_dir=str(tmp_path), spill_threshold=1)
    assert part.summary(keep=False) == ArrowPartition(source).summary()
    assert list(part.batches()) == []
    assert not list(tmp_path.iterdir())
