"""Fixtures of the secured runs: topics and a Spark session on the ``secure_kafka`` listener."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from connectors.kafka import register
from integration_tests.conftest import ClosableAdmin, topics_on
from integration_tests.support.secure_kafka import SecureKafka


@pytest.fixture(scope="session")
def secure_admin(secure_kafka: SecureKafka) -> Iterator[ClosableAdmin]:
    """An AdminClient on the secured listener, destroyed before its broker stops."""
    with contextlib.closing(ClosableAdmin(secure_kafka.client_config())) as admin:
        yield admin


@pytest.fixture
def secure_topic(secure_admin: ClosableAdmin) -> Iterator[Callable[..., str]]:
    """Factory: ``make(prefix, partitions=1)``, a new topic on the secured listener."""
    with topics_on(secure_admin) as make:
        yield make


@pytest.fixture
def rc_spark(spark: Any) -> Any:
    """The session's SparkSession with the kafka-rc format registered."""
    register(spark)
    return spark
