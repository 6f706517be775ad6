"""Unit tests of the range reader's poll loop: chunk sizes, error events inside a poll,
the cyclic GC pause, and the fetch settings (fake consumer; real ones in integration_tests)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, TopicPartition

from connectors.kafka._source import OffsetRange, SourceOptions, _consumers, _fetch, _options

from ._fakes import FakeConsumer, FakeLog, FakeMessage


@pytest.fixture(autouse=True, params=[0, 64], ids=["one-consumer-per-read", "reuse"])
def cache_capacity(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every read runs on both paths: the reference (capacity 0) and consumer reuse."""
    monkeypatch.setattr(_options, "DEFAULT_CONSUMER_CACHE_CAPACITY", request.param)
    return int(request.param)


def options(**extra: str) -> SourceOptions:
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    return SourceOptions.from_options({**base, **extra})


def read(
    log: FakeLog, rng: OffsetRange, monkeypatch: pytest.MonkeyPatch, **extra: str
) -> list[int]:
    monkeypatch.setattr(_fetch._client, "consumer", lambda _cluster, conf: FakeConsumer(log, conf))
    batches = list(_fetch.read_range(options(**extra), rng))
    return pa.concat_arrays([b.column("offset") for b in batches]).to_pylist() if batches else []


def test_a_poll_never_asks_for_more_than_the_range_can_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = _fetch.ARROW_BATCH_ROWS + 10
    log = FakeLog({i: "data" for i in range(n + 50)}, lso=n + 50)
    assert read(log, OffsetRange(topic="t", partition=0, start=3, end=n), monkeypatch) == list(
        range(3, n)
    )
    (consumer,) = log.consumers
    # a full chunk, then exactly the rest, briefly: the last poll waits for no row past the end
    assert [(pos, asked, timeout) for pos, asked, timeout, _gc in consumer.polls] == [
        (3, _fetch.ARROW_BATCH_ROWS, _fetch.POLL_INTERVAL_S),
        (3 + _fetch.ARROW_BATCH_ROWS, n - 3 - _fetch.ARROW_BATCH_ROWS, _fetch.TAIL_POLL_S),
    ]
    assert _fetch.TAIL_POLL_S < _fetch.POLL_INTERVAL_S


def test_one_poll_makes_one_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    log = FakeLog({i: "data" for i in range(30)}, lso=30)
    monkeypatch.setattr(_fetch._client, "consumer", lambda _cluster, conf: FakeConsumer(log, conf))
    batches = list(
        _fetch.read_range(options(), OffsetRange(topic="t", partition=0, start=0, end=30))
    )
    assert [b.num_rows for b in batches] == [30]


def test_gc_is_paused_during_a_poll_only_and_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    log = FakeLog({i: "data" for i in range(5)}, lso=5)
    monkeypatch.setattr(_fetch._client, "consumer", lambda _cluster, conf: FakeConsumer(log, conf))
    assert gc.isenabled()
    batches = _fetch.read_range(options(), OffsetRange(topic="t", partition=0, start=0, end=5))
    next(batches)
    assert gc.isenabled()  # on while Spark holds the batch (between two polls)
    assert list(batches) == []
    assert gc.isenabled()
    assert [on for *_poll, on in log.consumers[0].polls] == [False]
    gc.disable()
    try:
        assert read(
            FakeLog({0: "data"}, lso=1),
            OffsetRange(topic="t", partition=0, start=0, end=1),
            monkeypatch,
        ) == [0]
        assert not gc.isenabled()  # a caller's choice is left alone
    finally:
        gc.enable()


class ScriptedConsumer:
    """Returns one scripted poll result per ``consume`` call; the position follows it."""

    def __init__(self, polls: list[list[FakeMessage]]) -> None:
        self.polls: Iterator[list[FakeMessage]] = iter(polls)
        self.pos = -1001

    def assign(self, tps: list[TopicPartition]) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        messages = next(self.polls, [])
        for m in messages:
            self.pos = max(self.pos, m.offset() + (0 if m.error() else 1))
        return messages

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition("t", 0, self.pos)]

    def close(self) -> None:
        pass

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        self.asked = [*getattr(self, "asked", []), topic]


def eof(offset: int) -> FakeMessage:
    return FakeMessage(offset, _error=KafkaError(KafkaError._PARTITION_EOF))


def scripted(polls: list[list[FakeMessage]], rng: OffsetRange, mp: pytest.MonkeyPatch) -> Any:
    _consumers.close_idle()  # a script is one new consumer (its assign() moves nothing)
    mp.setattr(_fetch._client, "consumer", lambda _cluster, _conf: ScriptedConsumer(polls))
    mp.setattr(_fetch, "POLL_INTERVAL_S", 0.0)
    opts = options(**{"kafkaConsumer.pollTimeoutMs": "200"})  # a wrong script fails fast
    return [r["offset"] for b in _fetch.read_range(opts, rng) for r in b.to_pylist()]


def test_data_after_an_eof_inside_one_poll_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    # an EOF below the end (more data came after the fetch that reached the end) does not
    # end the range; the data after it in the same poll is kept, the data past the end not
    poll = [FakeMessage(0), FakeMessage(1), eof(2), FakeMessage(2), FakeMessage(4), eof(6)]
    assert scripted([poll], OffsetRange(topic="t", partition=0, start=0, end=6), monkeypatch) == [
        0,
        1,
        2,
        4,
    ]
    poll = [FakeMessage(0), eof(1), FakeMessage(1), FakeMessage(2), FakeMessage(3), eof(4)]
    assert scripted([poll], OffsetRange(topic="t", partition=0, start=0, end=3), monkeypatch) == [
        0,
        1,
        2,
    ]


def test_an_eof_at_the_end_completes_the_range_and_drops_what_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # offsets 3..4 are a marker and aborted records: the EOF at 5 ends [0, 5)
    first = [FakeMessage(0), FakeMessage(1), FakeMessage(2), eof(5), FakeMessage(5)]
    assert scripted([first], OffsetRange(topic="t", partition=0, start=0, end=5), monkeypatch) == [
        0,
        1,
        2,
    ]


def test_a_stale_topic_verdict_makes_the_consumer_ask_for_the_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 38: a consumer that lived through a broker restart may refuse the topic; its
    # own metadata request lifts that, and the read goes on with the same consumer.
    made: list[ScriptedConsumer] = []
    stale = FakeMessage(0, _error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    polls = [[stale], [FakeMessage(0), FakeMessage(1)]]

    def new(_cluster: Any, _conf: Any) -> ScriptedConsumer:
        made.append(ScriptedConsumer(polls))
        return made[-1]

    _consumers.close_idle()
    monkeypatch.setattr(_fetch._client, "consumer", new)
    monkeypatch.setattr(_fetch, "POLL_INTERVAL_S", 0.0)
    opts = options(**{"kafkaConsumer.pollTimeoutMs": "2000"})
    rows = [
        r["offset"]
        for b in _fetch.read_range(opts, OffsetRange(topic="t", partition=0, start=0, end=2))
        for r in b.to_pylist()
    ]
    assert rows == [0, 1]
    assert len(made) == 1 and made[0].asked == ["t"]


def test_fetch_backoff_is_short_unless_the_user_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    log = FakeLog({0: "data"}, lso=1)
    read(log, OffsetRange(topic="t", partition=0, start=0, end=1), monkeypatch)
    assert log.consumers[0].conf["fetch.queue.backoff.ms"] == str(_fetch.FETCH_QUEUE_BACKOFF_MS)
    log = FakeLog({0: "data"}, lso=1)
    read(
        log,
        OffsetRange(topic="t", partition=0, start=0, end=1),
        monkeypatch,
        **{"kafka.fetch.queue.backoff.ms": "500"},
    )
    assert "fetch.queue.backoff.ms" not in log.consumers[0].conf  # the cluster settings carry it
