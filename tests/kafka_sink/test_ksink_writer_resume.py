"""RecordWriter's key/value path resumes at the exact row after a full queue or an error.

Unit test of one module against a recording producer double (like test_ksink_writer).
"""

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException

from connectors.kafka import KafkaCode, KafkaConnectorError
from connectors.kafka._sink._writer import DeliveryErrors, RecordLayout, RecordWriter
from connectors.stage._rows import HASH_COLUMN


class QueueProducer:
    """Raises BufferError on chosen attempts and a too-large error for one value."""

    def __init__(self, full_on=(), too_large=None):
        self.sent = []
        self.attempts = 0
        self.polls = 0
        self.full_on = set(full_on)
        self.too_large = too_large

    def produce(self, topic, value=None, key=None, partition=-1, headers=None):
        self.attempts += 1
        if self.attempts in self.full_on:
            raise BufferError("queue full")
        if value == self.too_large:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too big"))
        self.sent.append((key, value))

    def poll(self, timeout):
        self.polls += 1
        return 0

    def flush(self, timeout):
        return 0


def rows(n, start=0):
    keys = [f"k{i}".encode() for i in range(start, start + n)]
    values = [f"v{i}".encode() for i in range(start, start + n)]
    return keys, values


def batch(keys, values):
    return pa.record_batch(
        {"key": keys, "value": values, HASH_COLUMN: pa.array(range(len(keys)), pa.int64())}
    )


def write(producer, *batches):
    w = RecordWriter(producer, DeliveryErrors(), RecordLayout(key=True), "out")
    w.write([batch(k, v) for k, v in batches])
    return w


@pytest.mark.parametrize("full_on", [(), (1,), (5,), (10,), (3, 4, 5), (2, 9, 14)])
def test_every_row_once_in_order_whatever_attempt_finds_the_queue_full(full_on):
    first, second = rows(10), rows(4, start=10)
    p = QueueProducer(full_on=full_on)
    w = write(p, first, second)
    assert p.sent == list(zip(first[0] + second[0], first[1] + second[1], strict=True))
    assert w.rows == 14
    assert p.polls == len(full_on)  # served only to make room: no poll between batches


@pytest.mark.parametrize("full_on", [(), (4,), (7,), (8,)])
def test_too_large_row_is_named_after_rows_before_it_were_produced(full_on):
    keys, values = rows(10)
    values[6] = b"x" * 50
    p = QueueProducer(full_on=full_on, too_large=b"x" * 50)
    with pytest.raises(
        KafkaConnectorError,
        match="value 50 bytes",
        check=lambda e: e.code is KafkaCode.RECORD_TOO_LARGE,
    ) as info:
        write(p, (keys, values))
    assert info.value.column == "value"
    assert p.sent == list(zip(keys[:6], values[:6], strict=True))


def test_row_that_did_not_fit_and_then_is_too_large_is_typed():
    keys, values = rows(5)
    values[2] = b"x" * 50
    p = QueueProducer(full_on=(3,), too_large=b"x" * 50)  # attempt 3 is row 2
    with pytest.raises(
        KafkaConnectorError, check=lambda e: e.code is KafkaCode.RECORD_TOO_LARGE
    ) as info:
        write(p, (keys, values))
    assert info.value.column == "value"
    assert p.sent == list(zip(keys[:2], values[:2], strict=True))
