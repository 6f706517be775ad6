"""Fixtures for broker-specific tests: these start their own minikafka on purpose
(fault hooks, restarts and raw bad input need a broker the test controls)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from minikafka import BrokerConfig, EmbeddedKafka

# Seconds for admin requests and client round trips on a busy shared machine.
CLIENT_TIMEOUT_S = 30.0


@pytest.fixture
def embedded() -> Iterator[EmbeddedKafka]:
    """A fresh in-memory broker per test (fault hooks must not leak between tests)."""
    cfg = BrokerConfig(group_initial_rebalance_delay_ms=0)
    with EmbeddedKafka(config=cfg) as broker:
        yield broker


def make_topic(bootstrap: str, partitions: int = 1) -> str:
    """Create a uniquely named topic and return its name."""
    name = f"mk-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(CLIENT_TIMEOUT_S)
    return name


@pytest.fixture
def topic_factory() -> Callable[..., str]:
    """``make_topic`` as a fixture."""
    return make_topic
