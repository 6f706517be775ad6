"""Small client helpers shared by the broker tests."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, TopicPartition

# Seconds a consumer waits for the next message before deciding the partition is drained.
POLL_TIMEOUT_S = 10.0
# Milliseconds the broker may hold an empty fetch: the end of a partition is seen only
# through one, which the clients' default (500) delays.
EMPTY_FETCH_WAIT_MS = 20


def read_all(bootstrap: str, topic: str, *, committed: bool = True, partition: int = 0) -> list:
    """Every visible value of one partition, reading until end-of-partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "fetch.wait.max.ms": EMPTY_FETCH_WAIT_MS,
        }
    )
    try:
        consumer.list_topics(topic, timeout=POLL_TIMEOUT_S)  # assigned without, a fetch waits
        consumer.assign([TopicPartition(topic, partition, 0)])
        values = []
        while True:
            msg = consumer.poll(POLL_TIMEOUT_S)
            if msg is None:
                raise TimeoutError(f"no end-of-partition for {topic} after {POLL_TIMEOUT_S}s")
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return values
                raise RuntimeError(str(msg.error()))
            values.append(msg.value())
    finally:
        consumer.close()
