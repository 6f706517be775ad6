"""The Kafka broker of a benchmark: a given bootstrap address, else a minikafka subprocess."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """Yield ``bootstrap`` if given (any Kafka), else start minikafka and yield its address."""
    if bootstrap:
        yield bootstrap
        return
    from minikafka import BrokerProcess

    with BrokerProcess() as process:
        yield process.bootstrap_servers
