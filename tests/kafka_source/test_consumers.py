"""Unit tests of consumer reuse in a Python worker (``connectors.kafka._source._consumers``).

Consumers are the librdkafka-like doubles of ``_fakes.py``; ``read_range`` is the code a
Spark task runs. The rules under test are the module docstring's. Reuse against a real
broker and through Spark is in integration_tests/kafka_source/test_consumer_reuse.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from connectors.kafka import KafkaCode, KafkaConnectorError
from connectors.kafka._source import OffsetRange, SourceOptions, _consumers, _fetch

from ._fakes import FakeConsumer, FakeLog

DATA = 20


# Seconds a test waits for the consumers a read closed (closes run on a thread of their own).
CLOSE_WAIT_S = 30.0


def options(**extra: str) -> SourceOptions:
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    return SourceOptions.from_options({**base, **extra})


class Logs:
    """The fake logs consumers are made on: the next consumer reads ``self.current``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.current = FakeLog(dict.fromkeys(range(DATA), "data"), lso=DATA)
        monkeypatch.setattr(_fetch._client, "consumer", self.new)
        monkeypatch.setattr(_fetch, "POLL_INTERVAL_S", 0.0)

    def new(self, _cluster: Any, conf: dict[str, Any]) -> FakeConsumer:
        return FakeConsumer(self.current, conf)


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch) -> Logs:
    return Logs(monkeypatch)


def read(rng: OffsetRange, opts: SourceOptions | None = None) -> list[int]:
    batches = _fetch.read_range(opts or options(), rng)
    return [r["offset"] for b in batches for r in b.to_pylist()]


def test_the_next_range_continues_on_the_same_consumer(logs: Logs) -> None:
    before = _consumers.stats()
    assert read(OffsetRange(topic="t", partition=0, start=0, end=5)) == [0, 1, 2, 3, 4]
    assert read(OffsetRange(topic="t", partition=0, start=5, end=12)) == list(range(5, 12))
    assert read(OffsetRange(topic="t", partition=0, start=12, end=20)) == list(range(12, 20))
    (consumer,) = logs.current.consumers
    assert consumer.assigned == [0]  # assigned once: each range starts at its position
    assert not consumer.closed and _consumers.stats().idle == 1  # kept for the next range
    after = _consumers.stats()
    assert (after.created - before.created, after.reused - before.reused) == (1, 2)


def test_a_range_starting_elsewhere_gets_a_new_consumer(logs: Logs) -> None:
    assert read(OffsetRange(topic="t", partition=0, start=0, end=10)) == list(range(10))
    assert read(OffsetRange(topic="t", partition=0, start=4, end=8)) == [
        4,
        5,
        6,
        7,
    ]  # a replayed or split range
    assert read(OffsetRange(topic="t", partition=0, start=12, end=14)) == [
        12,
        13,
    ]  # a gap: offsets 8-11 skipped
    first, second, third = logs.current.consumers
    assert _consumers.wait_for_closes(CLOSE_WAIT_S)
    assert first.closed and second.closed and not third.closed
    assert [c.assigned for c in logs.current.consumers] == [[0], [4], [12]]


def test_records_past_a_range_ending_on_markers_go_to_the_next_range(logs: Logs) -> None:
    # 0-4 data, 5 a commit marker, 6-9 data: [0, 6) holds 5 records, so its last poll
    # (of up to 6) returns record 6 too; it is kept for [6, 10), which continues.
    kinds = {**dict.fromkeys(range(10), "data"), 5: "ctrl"}
    logs.current = FakeLog(kinds, lso=10)
    assert read(OffsetRange(topic="t", partition=0, start=0, end=6)) == [0, 1, 2, 3, 4]
    (consumer,) = logs.current.consumers
    assert consumer.pos == 7  # it returned record 6 already
    assert read(OffsetRange(topic="t", partition=0, start=6, end=10)) == [6, 7, 8, 9]
    assert consumer.assigned == [0] and not consumer.closed


@pytest.mark.parametrize("start", [6, 7, 8, 9])
def test_a_range_starting_anywhere_up_to_the_position_continues(logs: Logs, start: int) -> None:
    # 5 a marker, 6 aborted, 7 a marker: [0, 6)'s last poll returns record 8 (position 9);
    # a next range starting at 6, 7, 8 or 9 has no other record before 9 and continues.
    kinds = {**dict.fromkeys(range(12), "data"), 5: "ctrl", 6: "aborted", 7: "ctrl"}
    logs.current = FakeLog(kinds, lso=12)
    assert read(OffsetRange(topic="t", partition=0, start=0, end=6)) == [0, 1, 2, 3, 4]
    assert read(OffsetRange(topic="t", partition=0, start=start, end=12)) == [
        o for o in (8, 9, 10, 11) if o >= start
    ]
    (consumer,) = logs.current.consumers
    assert consumer.assigned == [0]


def test_a_failed_read_closes_its_consumer(logs: Logs) -> None:
    logs.current.log_start = 3  # offsets 0-2 deleted: data loss under failOnDataLoss
    with pytest.raises(KafkaConnectorError, check=lambda e: e.code is KafkaCode.DATA_LOSS):
        read(OffsetRange(topic="t", partition=0, start=0, end=5))
    assert read(OffsetRange(topic="t", partition=0, start=3, end=5)) == [3, 4]
    first, second = logs.current.consumers
    assert _consumers.wait_for_closes(CLOSE_WAIT_S)
    assert first.closed and not second.closed


def test_an_abandoned_read_closes_its_consumer(logs: Logs) -> None:
    batches = _fetch.read_range(options(), OffsetRange(topic="t", partition=0, start=0, end=20))
    next(batches)
    batches.close()  # Spark stopped reading (a limit, a cancelled task)
    assert _consumers.wait_for_closes(CLOSE_WAIT_S)
    (consumer,) = logs.current.consumers
    assert consumer.closed


def test_a_consumer_moved_while_idle_is_replaced(logs: Logs) -> None:
    read(OffsetRange(topic="t", partition=0, start=0, end=5))
    (moved,) = logs.current.consumers
    moved.pos = 2  # its position is not the one it was put back with
    assert read(OffsetRange(topic="t", partition=0, start=5, end=8)) == [5, 6, 7]
    assert _consumers.wait_for_closes(CLOSE_WAIT_S)
    assert moved.closed and len(logs.current.consumers) == 2


def test_capacity_bounds_the_idle_consumers_least_recently_used_first(logs: Logs) -> None:
    opts = options(**{"kafkaConsumer.cache.capacity": "1"})
    read(OffsetRange(topic="t", partition=0, start=0, end=5), opts)
    first = logs.current
    logs.current = FakeLog(dict.fromkeys(range(DATA), "data"), lso=DATA)
    read(OffsetRange(topic="t", partition=1, start=0, end=5), opts)
    (evicted,), (kept,) = first.consumers, logs.current.consumers
    assert _consumers.wait_for_closes(CLOSE_WAIT_S)
    assert evicted.closed and not kept.closed
    assert _consumers.stats().idle == 1


def test_capacity_zero_is_one_consumer_per_read(logs: Logs) -> None:
    opts = options(**{"kafkaConsumer.cache.capacity": "0"})
    for start in (0, 5, 10):
        assert read(OffsetRange(topic="t", partition=0, start=start, end=start + 5), opts) == list(
            range(start, start + 5)
        )
    assert _consumers.wait_for_closes(CLOSE_WAIT_S)
    assert [c.closed for c in logs.current.consumers] == [True, True, True]
    assert _consumers.stats().idle == 0


def test_other_client_settings_never_share_a_consumer(logs: Logs) -> None:
    read(OffsetRange(topic="t", partition=0, start=0, end=5))
    read(
        OffsetRange(topic="t", partition=0, start=5, end=10),
        options(**{"kafka.client.id": "other"}),
    )
    assert len(logs.current.consumers) == 2


def test_a_forked_child_sets_the_parents_consumers_aside(
    logs: Logs, monkeypatch: pytest.MonkeyPatch
) -> None:
    read(OffsetRange(topic="t", partition=0, start=0, end=5))
    (parents,) = logs.current.consumers
    monkeypatch.setattr(_consumers.os, "getpid", lambda: -1)  # now in another process
    assert read(OffsetRange(topic="t", partition=0, start=5, end=10)) == list(range(5, 10))
    assert len(logs.current.consumers) == 2
    assert not parents.closed  # a parent's librdkafka handle is never touched in a child
    assert _consumers.stats() == _consumers.ConsumerStats(created=1, reused=0, idle=1)


def test_a_close_that_never_ends_does_not_hold_up_the_read(logs: Logs) -> None:
    """An evicted consumer whose close hangs (its cluster gone) never blocks the task."""
    opts = options(**{"kafkaConsumer.cache.capacity": "1"})
    read(OffsetRange(topic="t", partition=0, start=0, end=5), opts)
    (stuck,) = logs.current.consumers
    release = threading.Event()
    stuck.close = release.wait  # type: ignore[method-assign]
    logs.current = FakeLog(dict.fromkeys(range(DATA), "data"), lso=DATA)
    assert read(OffsetRange(topic="t", partition=1, start=0, end=5), opts) == list(
        range(5)
    )  # evicts the stuck one
    assert not _consumers.wait_for_closes(0.2)  # still closing, and the read returned
    release.set()
    assert _consumers.wait_for_closes(CLOSE_WAIT_S)
