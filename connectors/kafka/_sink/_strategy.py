"""Producer strategies: where a write task's producer comes from, and where it goes after.

Chosen by the sink's ``producer_strategy`` option, once per sink, the way Flink's Kafka sink
chooses its ``TransactionNamingStrategy``:

* ``"reference"`` (:class:`ProducerStrategy.REFERENCE`, ``_reference``): a new producer
  (exactly-once: transactional, with its marker consumer) per write task, fenced by
  ``init_transactions`` on the task's transactional id ``{sink_id}-{p}``, closed at the
  task's end. Nothing outlives a task; the simple path, to read first;
* ``"pooled"`` (:class:`ProducerStrategy.POOLED`, the default, ``_pooled``): each Python
  worker keeps producers across epochs (``_pool``: lanes, spares, prepared producers) and
  a task serves with a kept one when the driver's reuse rules allow it (``_reuse``, the
  stage's back channel). Faster: a steady epoch sends no client set-up request.

Both give a participant a :class:`TaskProducers`: the same interface, the same
transactions, markers and recovery (docs/kafka-sink.md, "Producer strategies").
"""

from __future__ import annotations

import abc
import contextlib
import enum
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer

from connectors.kafka._sink._writer import DeliveryErrors
from txn import Marker


class ProducerStrategy(str, enum.Enum):
    """How the write tasks get their producers (the ``producer_strategy`` option)."""

    REFERENCE = "reference"
    POOLED = "pooled"


# The values of the ``producer_strategy`` option.
PRODUCER_STRATEGIES = tuple(s.value for s in ProducerStrategy)


@dataclass
class Clients:
    """A write task's producer (with its delivery errors) and marker consumer (exactly-once).

    ``producer`` None: not created yet, or dropped after a fatal error (never used again).
    """

    producer: Producer | None
    errors: DeliveryErrors
    consumer: Consumer | None


class TaskProducers(abc.ABC):
    """The clients of one participant (one write task), from :meth:`open` to :meth:`close`.

    After :meth:`open`: ``clients.producer`` is ready (exactly-once: initialized, unless a
    kept one serves) and ``clients.consumer`` reads the partition's marker; ``reused``
    says a kept producer serves, whose marker, read while deciding, is ``marker``.
    """

    reused = False
    marker: Marker | None = None

    @property
    @abc.abstractmethod
    def clients(self) -> Clients:
        """The task's clients (may change during :meth:`open`, never after)."""

    @abc.abstractmethod
    def open(self) -> str:
        """Make the clients ready; return why a new producer serves ("" if a kept one does).

        Raising leaves nothing open.
        """

    @abc.abstractmethod
    def close(self, *, clean: bool, committed: bool) -> None:
        """End the task's use of its clients. Idempotent.

        ``clean``: its transaction ended cleanly (``_reuse.ended_cleanly``; for the
        plain guarantees: its queue flushed too); ``committed``: it committed one.
        """


def close_consumer(consumer: Consumer | None) -> None:
    """Close ``consumer`` if any; a failure to close is of no consequence (it only read)."""
    if consumer is not None:
        with contextlib.suppress(KafkaException, RuntimeError):
            consumer.close()
