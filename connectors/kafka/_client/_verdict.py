"""Lifting a long-lived client's stale "Unknown topic" verdict (issue 38).

A librdkafka client that heard a topic is gone while a broker restarted can keep refusing
it after the broker has it again (docs/kafka-semantics.md, "A stale Unknown-topic
verdict"); ``_classify.stale_topic_verdict`` names the errors. Two recipes lift it:

1. replace the client (the epoch log's producer, whose transaction holds nothing else);
2. keep it and ask the brokers for the topic with the client's own metadata request,
   again and again (:func:`refresh_topic`): librdkafka accepts the topic at the first
   answer that comes ``topic.metadata.propagation.max.ms`` after its verdict, so a
   producer inside a transaction goes on without losing the records it wrote.
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaException

# Seconds between two metadata requests of a client that refuses a topic: the verdict
# lifts at the first answer after librdkafka's propagation time (30 s by default), so a
# request a second keeps the wait within a second of that.
STALE_REFRESH_S = 1.0
# Seconds one such request may take (a broker still away: the caller's bound decides).
REFRESH_TIMEOUT_S = 5.0


class TopicRefresher:
    """Asks the brokers for a topic with the refusing client, at most every ``STALE_REFRESH_S``."""

    def __init__(self, client: object) -> None:
        self._client = client
        self._next = 0.0

    def refresh(self, topic: str) -> None:
        """Send the client's own metadata request for ``topic`` unless one went out recently."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + STALE_REFRESH_S
        try:
            self._client.list_topics(topic, timeout=REFRESH_TIMEOUT_S)  # type: ignore[attr-defined]
        except KafkaException:
            pass  # no broker answered: the caller retries within its own bound
