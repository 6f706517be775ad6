"""What the per-process client pool (``_pool``) holds: entries, spares, prepared records."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Producer

from connectors.kafka._sink._writer import DeliveryErrors


@dataclass
class PoolEntry:
    """The clients of one transactional id in one process, between two epochs.

    ``producer`` is None when only the consumer is kept. ``token`` names the producer
    instance (minted by its ``init_transactions``; tasks report it, ``connectors.stage``'s
    ``ClientNote``). ``generation`` is the driver's client generation the producer was
    last used under (see ``KafkaSink``).
    """

    producer: Producer | None
    errors: DeliveryErrors
    consumer: Consumer | None
    token: str = ""
    generation: str = ""
    serial: int = 0  # the ticket under which the driver was last told of it (``_prepare``)


@dataclass(frozen=True)
class Prepared:
    """A prepared, not yet reported instance: what a task reports (``ClientNote.prepared``)."""

    partition: int
    lane: int
    token: str
    generation: str
    serial: int


@dataclass
class Spare:
    """A producer (with its delivery callback) and a marker consumer, created, never initialized.

    ``consumer`` is None when the spare was made for an id whose marker consumer is pooled;
    ``created``: when (``time.monotonic``).
    """

    producer: Producer
    errors: DeliveryErrors
    consumer: Consumer | None
    created: float = field(default_factory=time.monotonic)


# Factory of a spare: ``with_consumer`` False when the id's marker consumer is pooled.
SpareFactory = Callable[[bool], Spare]


Key = tuple[str, ...]

# Makes a prepared entry of a key from its spare (if any) and the key's pooled marker
# consumer (if any): initializes the producer; raising drops the preparation.
Preparer = Callable[["Spare | None", "Consumer | None"], tuple[PoolEntry, Prepared]]


def discard(entry: PoolEntry) -> None:
    """Release ``entry``'s clients (a producer's open transaction is left to the broker)."""
    if entry.consumer is not None:
        with contextlib.suppress(KafkaException, RuntimeError):
            entry.consumer.close()
    entry.consumer = None
    entry.producer = None
