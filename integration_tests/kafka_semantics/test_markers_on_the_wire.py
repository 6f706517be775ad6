"""Transaction markers and aborted-transaction lists as Fetch returns them (KIP-98).

librdkafka hides both, yet the kit's invariant checker scans raw batches (read_uncommitted Fetch)
to learn which records were committed, aborted or are still open, and every read_committed
client filters aborted data with the broker's aborted-transaction list. This pins what those
rely on, on the wire:

1. a commit or abort marker is a control batch (transactional and control bits set) at its own
   offset, carrying the producer id of the transaction it ends and a control record of type
   COMMIT (1) or ABORT (0);
2. a transaction's data batches carry the transactional bit and that producer id;
3. a read_committed Fetch returns the raw batches below the last stable offset, aborted ones
   and markers included, and lists (producer id, first offset) of every aborted transaction
   whose range overlaps the fetched range; none whose abort marker lies before the fetch offset;
4. a read_committed Fetch of a partition with an open transaction stops at its first offset,
   while read_uncommitted returns everything up to the high watermark.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka.admin import AdminClient

from ._support import (
    CLIENT_TIMEOUT_S,
    plain_producer,
    produce_values,
    txn_producer,
    unique,
    wait_stable,
)
from ._wire import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    NONE,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchResult,
    RawBatch,
    WireClient,
)


def _offsets(result: FetchResult) -> list[int]:
    """Every offset the fetched batches cover, in order (records and markers)."""
    return [o for b in result.batches for o in range(b.base_offset, b.last_offset + 1)]


def _marker_at(result: FetchResult, offset: int) -> RawBatch:
    (batch,) = [b for b in result.batches if b.base_offset == offset]
    assert batch.control and batch.transactional, batch
    assert batch.base_offset == batch.last_offset, "a marker is one record"
    return batch


def _data(result: FetchResult) -> list[tuple[int, bytes | None, int, bool]]:
    """(offset, value, producer id, transactional) of every data record."""
    return [
        (offset, value, b.producer_id, b.transactional)
        for b in result.batches
        if not b.control
        for offset, value in b.records
    ]


def test_fetch_returns_markers_and_lists_aborted_transactions(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    new_topic: Callable[..., str],
    leader_client: Callable[[str, int], WireClient],
) -> None:
    topic = new_topic("wire-markers")
    plain = plain_producer(kafka_bootstrap)
    committer = txn_producer(kafka_bootstrap, unique("wire-commit"))
    aborter = txn_producer(kafka_bootstrap, unique("wire-abort"))

    produce_values(plain, topic, ["p1"])  # offset 0
    committer.begin_transaction()
    produce_values(committer, topic, ["c1"])  # offset 1
    committer.commit_transaction(CLIENT_TIMEOUT_S)  # commit marker at 2
    assert wait_stable(kafka_admin, topic) == 3
    aborter.begin_transaction()
    produce_values(aborter, topic, ["a1"])  # offset 3
    produce_values(aborter, topic, ["a2"])  # offset 4
    aborter.abort_transaction(CLIENT_TIMEOUT_S)  # abort marker at 5
    assert wait_stable(kafka_admin, topic) == 6
    produce_values(plain, topic, ["p2"])  # offset 6

    client = leader_client(topic, 0)
    raw = client.fetch(topic, 0, 0, READ_UNCOMMITTED)
    assert raw.error_code == NONE
    assert (raw.high_watermark, raw.last_stable_offset) == (7, 7)
    assert _offsets(raw) == list(range(7)), "every offset is a record or a marker"
    data = _data(raw)
    committed_pid = next(pid for off, _, pid, _ in data if off == 1)
    aborted_pid = next(pid for off, _, pid, _ in data if off == 3)
    assert committed_pid >= 0 and aborted_pid >= 0 and committed_pid != aborted_pid
    assert [(off, value, txn) for off, value, _, txn in data] == [
        (0, b"p1", False),
        (1, b"c1", True),
        (3, b"a1", True),
        (4, b"a2", True),
        (6, b"p2", False),
    ]
    assert {pid for off, _, pid, _ in data if off in (3, 4)} == {aborted_pid}
    commit = _marker_at(raw, 2)
    abort = _marker_at(raw, 5)
    assert (commit.producer_id, commit.control_type) == (committed_pid, CONTROL_COMMIT)
    assert (abort.producer_id, abort.control_type) == (aborted_pid, CONTROL_ABORT)
    data_epoch = next(b.producer_epoch for b in raw.batches if b.base_offset == 3)
    assert abort.producer_epoch == data_epoch, "a client's own abort keeps its epoch"

    whole = client.fetch(topic, 0, 0, READ_COMMITTED)
    assert whole.batches == raw.batches, "read_committed returns the raw batches below the LSO"
    assert whole.aborted == ((aborted_pid, 3),)
    # A fetch starting inside the aborted transaction still gets it listed ...
    assert client.fetch(topic, 0, 4, READ_COMMITTED).aborted == ((aborted_pid, 3),)
    # ... one starting after its abort marker does not.
    assert not client.fetch(topic, 0, 6, READ_COMMITTED).aborted


def test_read_committed_fetch_stops_at_an_open_transaction(
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    leader_client: Callable[[str, int], WireClient],
) -> None:
    topic = new_topic("wire-open")
    plain = plain_producer(kafka_bootstrap)
    txn = txn_producer(kafka_bootstrap, unique("wire-open"))
    produce_values(plain, topic, ["before"])  # offset 0
    txn.begin_transaction()
    produce_values(txn, topic, ["open"])  # offset 1, left open
    produce_values(plain, topic, ["after"])  # offset 2

    client = leader_client(topic, 0)
    committed = client.fetch(topic, 0, 0, READ_COMMITTED)
    assert (committed.high_watermark, committed.last_stable_offset) == (3, 1)
    assert _offsets(committed) == [0]
    assert not committed.aborted, "an open transaction is not aborted"
    uncommitted = client.fetch(topic, 0, 0, READ_UNCOMMITTED)
    assert [(off, value) for off, value, _, _ in _data(uncommitted)] == [
        (0, b"before"),
        (1, b"open"),
        (2, b"after"),
    ]
    txn.abort_transaction(CLIENT_TIMEOUT_S)
