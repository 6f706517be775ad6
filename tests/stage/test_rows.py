import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.stage._rows import (
    HASH_COLUMN,
    ArrowPartition,
    RowsConsumedError,
    combine_hashes,
    format_checksum,
)

int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def batches_of(hashes, cuts):
    """Split ``hashes`` into record batches at the sorted positions ``cuts``."""
    out, start = [], 0
    for cut in [*sorted(cuts), len(hashes)]:
        part = hashes[start:cut]
        out.append(
            pa.record_batch(
                {"value": [str(h) for h in part], HASH_COLUMN: pa.array(part, pa.int64())}
            )
        )
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


def test_streaming_before_summary_computes_it_on_the_way():
    source = batches_of([5, 6, 7, 8], [2])
    part = ArrowPartition(iter(source))
    assert sum(b.num_rows for b in part.batches()) == 4
    assert part.summary() == ArrowPartition(source).summary()


def test_empty_partition():
    s = ArrowPartition(iter([])).summary()
    assert s.rows == 0 and s.checksum == format_checksum(0, ordered=False)
    assert np.uint64(0) == 0


def test_rows_are_read_once_either_way():
    source = batches_of(list(range(100)), [10, 50])
    summarized = ArrowPartition(iter(source))
    assert summarized.summary() == ArrowPartition(source).summary()
    with pytest.raises(RowsConsumedError, match="one pass"):
        list(summarized.batches())
    written = ArrowPartition(iter(source))
    assert sum(b.num_rows for b in written.batches()) == 100
    assert written.summary() == summarized.summary()  # computed on the way, not re-read
    with pytest.raises(RowsConsumedError):
        list(written.batches())


def test_interrupt_fires_once_when_the_writer_asks_for_more_after_enough_rows():
    fired: list[int] = []
    rows = ArrowPartition(
        batches_of(list(range(30)), [10, 20]), interrupt=(15, lambda: fired.append(len(seen)))
    )
    seen: list[pa.RecordBatch] = []
    for batch in rows.batches():
        seen.append(batch)
    assert fired == [2]  # after the second batch (20 rows handed over), once
    assert rows.summary().rows == 30
    quiet = ArrowPartition(
        batches_of(list(range(30)), [10]), interrupt=(99, lambda: fired.append(-1))
    )
    assert quiet.summary().rows == 30 and fired == [2]  # a summary pass never fires
