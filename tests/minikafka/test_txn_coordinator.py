"""TransactionCoordinator on its own (real topics, offsets and journal, a hand-driven clock)."""

import pytest
from kio.schema.errors import ErrorCode

from minikafka import BrokerConfig
from minikafka._cluster import Nodes
from minikafka._journal import Journal
from minikafka._offsets import CommittedOffset, OffsetStore
from minikafka._records import control_type, split_batches
from minikafka._topics import TopicRegistry
from minikafka._txn import EXHAUSTED_EPOCH, TransactionCoordinator
from tests.minikafka.batches import make_batch
from tests.minikafka.clock import ManualClock

TID = "tx"
TIMEOUT_MS = 60_000
V_OLD, V_NEW = 1, 4  # InitProducerId/EndTxn versions before and after KIP-588


class Rig:
    def __init__(self) -> None:
        self.clock = ManualClock()
        journal = Journal(None, fsync=False)
        config = BrokerConfig()
        self.topics = TopicRegistry(config, None, journal, Nodes(config.node_ids, self.clock))
        self.topics.create("t", 1)
        self.offsets = OffsetStore(journal, self.clock)
        self.notified = 0
        self.txns = TransactionCoordinator(
            BrokerConfig(transaction_max_timeout_ms=TIMEOUT_MS),
            journal,
            self.topics,
            self.offsets,
            self.clock,
            self._notify,
        )

    def _notify(self) -> None:
        self.notified += 1

    def init(self, pid: int = -1, epoch: int = -1, version: int = V_NEW):
        return self.txns.init_producer_id(TID, TIMEOUT_MS, pid, epoch, version)

    def open_txn(self, pid: int, epoch: int) -> None:
        assert self.txns.add_partitions(TID, pid, epoch, [("t", 0)], 0) == {
            ("t", 0): ErrorCode.none
        }
        raw = make_batch([b"x"], producer_id=pid, epoch=epoch, base_sequence=0, transactional=True)
        self.topics.partition("t", 0).append(split_batches(raw))

    def markers(self) -> list[tuple[int, int, int]]:
        """(producer id, epoch, control type) of every control batch of t-0."""
        plog = self.topics.partition("t", 0)
        data = plog.read(0, 1 << 20, plog.high_watermark)
        return [
            (hdr.producer_id, hdr.producer_epoch, control_type(raw))
            for hdr, raw in split_batches(data)
            if hdr.is_control
        ]


def test_new_id_starts_at_epoch_zero_and_each_init_bumps_it():
    rig = Rig()
    err, pid, epoch = rig.init()
    assert (err, epoch) == (ErrorCode.none, 0)
    assert rig.init() == (ErrorCode.none, pid, 1)


def test_init_with_an_open_transaction_aborts_it_and_asks_for_a_retry():
    rig = Rig()
    _, pid, epoch = rig.init()
    rig.open_txn(pid, epoch)
    assert rig.init() == (ErrorCode.concurrent_transactions, -1, -1)
    # The abort marker carries the fenced (bumped) epoch; the retry bumps once more.
    assert rig.markers() == [(pid, epoch + 1, 0)]
    assert rig.topics.partition("t", 0).lso == rig.topics.partition("t", 0).high_watermark
    assert rig.init() == (ErrorCode.none, pid, epoch + 2)
    assert rig.txns.end_txn(TID, pid, epoch, True, 1) == ErrorCode.invalid_producer_epoch


def test_kip360_bump_by_the_same_producer_and_its_retry():
    rig = Rig()
    _, pid, epoch = rig.init()
    assert rig.init(pid, epoch) == (ErrorCode.none, pid, epoch + 1)
    # A retry of that bump (the answer was lost) gets the same epoch, no second bump.
    assert rig.init(pid, epoch) == (ErrorCode.none, pid, epoch + 1)
    # A producer with an older epoch than that is fenced.
    assert rig.init(pid, 7, V_NEW)[0] == ErrorCode.producer_fenced
    assert rig.init(pid, 7, V_OLD)[0] == ErrorCode.invalid_producer_epoch


def test_timeout_aborts_with_a_bumped_epoch_and_fences_the_producer():
    rig = Rig()
    _, pid, epoch = rig.init()
    rig.open_txn(pid, epoch)
    rig.txns.add_offsets(TID, pid, epoch, "g", 0)
    rig.offsets.add_pending(
        "g", pid, {("t", 0): CommittedOffset(offset=5, metadata=None, leader_epoch=-1, commit_ms=0)}
    )
    rig.clock.advance(TIMEOUT_MS)
    rig.txns.expire()
    assert rig.markers() == [], "not after exactly the timeout"
    rig.clock.advance(1)
    rig.txns.expire()
    assert rig.markers() == [(pid, epoch + 1, 0)]
    assert rig.offsets.fetch("g", ("t", 0)) == (None, False)
    assert rig.notified >= 1
    assert rig.txns.end_txn(TID, pid, epoch, True, 1) == ErrorCode.invalid_producer_epoch
    assert rig.txns.end_txn(TID, pid, epoch, True, 2) == ErrorCode.producer_fenced
    # The next instance starts cleanly.
    assert rig.init() == (ErrorCode.none, pid, epoch + 2)


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_writes_markers_settles_offsets_and_accepts_a_retry(commit):
    rig = Rig()
    _, pid, epoch = rig.init()
    rig.open_txn(pid, epoch)
    assert rig.txns.add_offsets(TID, pid, epoch, "g", 0) == ErrorCode.none
    assert rig.txns.check_offsets_commit(TID, pid, epoch, "g", 3) == ErrorCode.none
    assert rig.txns.check_offsets_commit(TID, pid, epoch, "other", 3) == ErrorCode.invalid_txn_state
    rig.offsets.add_pending(
        "g", pid, {("t", 0): CommittedOffset(offset=5, metadata=None, leader_epoch=-1, commit_ms=0)}
    )
    assert rig.txns.end_txn(TID, pid, epoch, commit, 1) == ErrorCode.none
    assert rig.markers() == [(pid, epoch, 1 if commit else 0)]
    value, unstable = rig.offsets.fetch("g", ("t", 0))
    assert not unstable and (value is not None) == commit
    assert rig.txns.end_txn(TID, pid, epoch, commit, 1) == ErrorCode.none
    assert rig.txns.end_txn(TID, pid, epoch, not commit, 1) == ErrorCode.invalid_txn_state


def test_unknown_partitions_are_reported_before_the_producer_check():
    rig = Rig()
    errors = rig.txns.add_partitions(TID, 999, 0, [("t", 0), ("t", 5)], 0)
    assert errors == {
        ("t", 0): ErrorCode.operation_not_attempted,
        ("t", 5): ErrorCode.unknown_topic_or_partition,
    }
    assert rig.txns.add_partitions(TID, 999, 0, [("t", 0)], 0) == {
        ("t", 0): ErrorCode.invalid_producer_id_mapping
    }


def test_exhausted_epoch_rotates_the_producer_id():
    rig = Rig()
    _, pid, _ = rig.init()
    rig.txns.txns[TID].epoch = EXHAUSTED_EPOCH
    err, new_pid, epoch = rig.init()
    assert (err, epoch) == (ErrorCode.none, 0) and new_pid != pid


def test_bad_requests():
    rig = Rig()
    assert rig.txns.init_producer_id("", TIMEOUT_MS, -1, -1, 4)[0] == ErrorCode.invalid_request
    too_long = rig.txns.init_producer_id(TID, TIMEOUT_MS + 1, -1, -1, 4)
    assert too_long[0] == ErrorCode.invalid_transaction_timeout
    assert rig.txns.init_producer_id(None, 0, -1, -1, 4)[0] == ErrorCode.none
    _, pid, epoch = rig.init()
    assert rig.txns.end_txn(TID, pid, epoch, True, 1) == ErrorCode.invalid_txn_state
