"""Fixtures of the end-to-end chaos tests."""

from __future__ import annotations

import pytest

from connectors.kafka import PRODUCER_STRATEGIES


@pytest.fixture(params=PRODUCER_STRATEGIES)
def producer_strategy(request: pytest.FixtureRequest) -> str:
    """The Kafka sink's producer strategy: each Kafka chaos test runs under every one.

    The reference strategy (a new producer per task) and the pooled one (producers kept
    across epochs, docs/kafka-sink.md, "Producer strategies") must both keep every
    invariant under the same faults.
    """
    return str(request.param)
