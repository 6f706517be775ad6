"""Fixtures of the model-based test: servers the test may restart, or the configured ones.

The model test restarts Kafka and PostgreSQL between steps, so it prefers servers it owns:
a minikafka broker (or a testcontainers Kafka when Docker answers) and an embedded (or
container) PostgreSQL. With ``KAFKA_BOOTSTRAP_SERVERS`` / ``POSTGRES_DSN`` set it runs against
those instead and leaves out the restart steps of that server (it cannot restart them).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration_tests.model._world import Servers


@pytest.fixture(scope="module")
def model_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """Kafka and PostgreSQL for the model test, restartable where the test owns them."""
    broker: Any = None
    pg_server: Any = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    dsn = os.environ.get("POSTGRES_DSN")
    try:
        if not bootstrap:
            from minikafka import BrokerProcess

            data = Path(tmp_path_factory.mktemp("model-broker"))
            broker = BrokerProcess(data_dir=data).start()
            bootstrap = broker.bootstrap_servers
        with contextlib.ExitStack() as stack:
            if not dsn:
                from connectors.testing.postgres import start_postgres_server

                pg_server = stack.enter_context(start_postgres_server())
                dsn = pg_server.dsn
            yield Servers(bootstrap=bootstrap, dsn=dsn, broker=broker, postgres=pg_server)
    finally:
        if broker is not None:
            broker.terminate()
