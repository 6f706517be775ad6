"""Fixtures of the Kafka semantics suite (on top of integration_tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient

from ._support import CLIENT_TIMEOUT_S
from ._wire import WireClient


def _first_address(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, _, port = first.rpartition(":")
    return host.strip("[]"), int(port)


@pytest.fixture(scope="session")
def api_versions(kafka_bootstrap: str) -> dict[int, tuple[int, int]]:
    """The API versions the (first) bootstrap broker advertises: {api_key: (min, max)}."""
    host, port = _first_address(kafka_bootstrap)
    with WireClient(host, port) as client:
        return client.api_versions()


@pytest.fixture
def require_api(api_versions: dict[int, tuple[int, int]]) -> Callable[[int, int, str], None]:
    """Skip the calling test unless the broker advertises ``api_key`` at ``version`` or above."""

    def check(api_key: int, version: int, feature: str) -> None:
        low_high = api_versions.get(api_key)
        if low_high is None:
            pytest.skip(f"broker does not advertise API key {api_key}, needed for {feature}")
        if low_high[1] < version:
            pytest.skip(
                f"broker advertises API key {api_key} up to v{low_high[1]}, "
                f"{feature} needs v{version}+"
            )

    return check


@pytest.fixture
def leader_client(kafka_admin: AdminClient) -> Iterator[Callable[[str, int], WireClient]]:
    """Factory: a raw wire connection to the leader of one topic partition."""
    opened: list[WireClient] = []

    def connect(topic: str, partition: int) -> WireClient:
        metadata = kafka_admin.list_topics(topic=topic, timeout=CLIENT_TIMEOUT_S)
        leader_id = metadata.topics[topic].partitions[partition].leader
        broker = metadata.brokers[leader_id]
        client = WireClient(broker.host, broker.port)
        opened.append(client)
        return client

    yield connect
    for client in opened:
        client.__exit__()
