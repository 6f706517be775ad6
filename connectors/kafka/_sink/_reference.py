"""The reference producer strategy: a new producer per write task, closed at its end.

Exactly-once: write partition ``p``'s task creates a transactional producer with id
``{sink_id}-{p}`` and runs ``init_transactions`` on it, which fences every older instance
of that id (a zombie attempt, the task of an earlier epoch) and aborts its open
transaction; it creates a marker consumer of the group ``{sink_id}.marker.{p}``, which the
participant reads after that (redo or skip). At the task's end both are dropped. One id
per partition, every attempt initializes it anew: the newest ``init_transactions`` wins,
so at most one instance can commit epoch ``N`` of ``p`` (docs/architecture.md, section 2).

At-least-once and at-most-once: a new idempotent producer per task, flushed by the
participant at its end and dropped.

What it costs over the pooled strategy (``_pooled``): one InitProducerId and the
coordinator look-ups of a new producer and consumer per task and epoch.
"""

from __future__ import annotations

from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._markers import marker_consumer
from connectors.kafka._sink._producers import init_transactions, new_producer
from connectors.kafka._sink._strategy import Clients, TaskProducers, close_consumer
from connectors.kafka._sink._writer import DeliveryErrors
from connectors.stage import TaskInfo


class NewProducerPerTask(TaskProducers):
    """The reference strategy's clients of write partition ``partition`` (module docstring)."""

    def __init__(self, cfg: SinkConfig, partition: int, task: TaskInfo[object] | None) -> None:
        self._cfg = cfg
        self._partition = partition
        self._task = task
        self._clients = Clients(None, DeliveryErrors(), None)

    @property
    def clients(self) -> Clients:
        """The task's producer and marker consumer."""
        return self._clients

    def open(self) -> str:
        """Create the producer (exactly-once: initialized) and the marker consumer."""
        cfg, clients = self._cfg, self._clients
        txn_id = cfg.transactional_id(self._partition) if cfg.transactional else None
        try:
            clients.producer = new_producer(cfg, txn_id, clients.errors)
            if txn_id is not None:
                group = cfg.marker_group(self._partition)
                clients.consumer = marker_consumer(cfg.cluster, group)
                init_transactions(clients.producer, txn_id)
        except BaseException:
            self.close(clean=False, committed=False)
            raise
        if self._task is not None:
            self._task.count_new_client()
        return "the reference strategy: a new producer per task"

    def close(self, *, clean: bool, committed: bool) -> None:
        """Drop both clients (an open transaction is aborted by the id's next initialization)."""
        consumer, self._clients.consumer = self._clients.consumer, None
        close_consumer(consumer)
        self._clients.producer = None
