"""Test doubles for unit tests of connectors.kafka._source._fetch / _arrow only."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, TopicPartition


@dataclass
class FakeMessage:
    _offset: int
    _value: bytes | None = b"v"
    _key: bytes | None = None
    _ts: tuple[int, int] = (1, 1_700_000_000_123)
    _headers: list[tuple[str, bytes | None]] | None = None
    _error: KafkaError | None = None
    _topic: str = "t"
    _partition: int = 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def timestamp(self) -> tuple[int, int]:
        return self._ts

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition


@dataclass
class FakeLog:
    """A partition log: offset -> 'data' | 'ctrl' | 'aborted'; readable up to ``lso``."""

    kinds: dict[int, str]
    lso: int
    log_start: int = 0
    consumers: list[FakeConsumer] = field(default_factory=list)


class FakeConsumer:
    """Mimics a read_committed librdkafka consumer on one partition.

    Position semantics follow librdkafka: consuming past control markers and aborted
    records advances the position without returning a message.
    """

    def __init__(self, log: FakeLog, conf: dict[str, Any]) -> None:
        self.log = log
        self.conf = conf
        self.pos: int | None = None
        self.next_fetch = 0
        self.closed = False
        self.assigned: list[int] = []  # the offsets of each assign()
        self.eof_sent_at: int | None = None
        self.polls: list[tuple[int, int, float, bool]] = []  # position, asked, timeout, GC on
        log.consumers.append(self)

    def assign(self, tps: list[TopicPartition]) -> None:
        (tp,) = tps
        self.assigned.append(tp.offset)
        self.next_fetch = tp.offset
        self.pos = None
        self.out_of_range_sent = False

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.polls.append((self.next_fetch, num_messages, timeout, gc.isenabled()))
        if self.next_fetch < self.log.log_start:
            err = KafkaError(KafkaError._AUTO_OFFSET_RESET)
            return [FakeMessage(self.next_fetch, _error=err)]
        out: list[Any] = []
        while self.next_fetch < self.log.lso and len(out) < num_messages:
            off = self.next_fetch
            self.next_fetch += 1
            self.pos = self.next_fetch
            if self.log.kinds.get(off, "none") == "data":
                out.append(FakeMessage(off, _value=f"v{off}".encode()))
        if self.next_fetch >= self.log.lso and self.eof_sent_at != self.next_fetch:
            self.eof_sent_at = self.next_fetch
            out.append(FakeMessage(self.next_fetch, _error=KafkaError(KafkaError._PARTITION_EOF)))
        return out

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        (tp,) = tps
        return [TopicPartition(tp.topic, tp.partition, -1001 if self.pos is None else self.pos)]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return self.log.log_start, self.log.lso

    def close(self) -> None:
        self.closed = True
