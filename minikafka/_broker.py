"""Broker state: topics, offsets, transaction coordinator, group coordinator, data notifications.

All state is owned by the asyncio loop thread that runs the server; nothing here is
thread-safe and nothing needs to be.

Each coordinator receives the parts it uses (config, journal, topics, offsets, clock,
the notify callback), never the broker itself, so the modules form no import cycle.

Start-up protocol (``open``):
1. replay the metadata journal (topics, producer ids, transactions, group offsets);
2. open every partition log, rebuilding producer state, LSO and aborted index;
3. rewrite the journal as a compact snapshot;
4. finish transactions the journal shows as PrepareCommit/PrepareAbort (write any
   missing markers, apply or drop pending transactional offsets).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from ._clock import Clock, SystemClock
from ._cluster import Cluster, Nodes
from ._config import BrokerConfig
from ._groups import GroupCoordinator
from ._journal import Journal
from ._offsets import OffsetStore
from ._stats import RequestCounter
from ._topics import TopicRegistry
from ._txn import TransactionCoordinator

log = logging.getLogger("minikafka.broker")


class Broker:
    """The state of a cluster of one or more nodes (shared by every node's listener)."""

    def __init__(
        self,
        config: BrokerConfig,
        data_dir: Path | None,
        *,
        clock: Clock | None = None,
        requests: RequestCounter | None = None,
    ) -> None:
        self.config = config
        self.data_dir = data_dir
        self.clock: Clock = clock or SystemClock()
        self.requests = requests or RequestCounter()
        journal_path = data_dir / "journal.bin" if data_dir is not None else None
        self.journal = Journal(journal_path, fsync=config.fsync_policy != "never")
        self.nodes = Nodes(config.node_ids, self.clock)
        self.topics = TopicRegistry(config, data_dir, self.journal, self.nodes)
        self.offsets = OffsetStore(self.journal, self.clock)
        self.txns = TransactionCoordinator(
            config, self.journal, self.topics, self.offsets, self.clock, self.notify_data
        )
        self.groups = GroupCoordinator(config, self.offsets, self.clock)
        self.cluster = Cluster(config, self.nodes, self.topics, self.clock)
        self.host = "127.0.0.1"
        self.ports: dict[int, int] = dict.fromkeys(config.node_ids, 0)
        self._waiters: list[asyncio.Future[None]] = []

    def topics_loaded(self, node: int) -> bool:
        """Return False while ``topic_load_delay_ms`` after the node's start has not passed.

        True from an ``end-loading`` operation on the node until its next start.
        """
        if node in self.nodes.loading_ended:
            return True
        elapsed_ms = (self.clock.monotonic_s() - self.nodes.started_s[node]) * 1000.0
        return elapsed_ms >= self.config.topic_load_delay_ms

    def end_loading(self, node: int) -> None:
        """End ``node``'s topic loading now (the ``end-loading`` operation), until its next start."""
        self.nodes.loading_ended.add(node)

    def open(self) -> None:
        """Replay durable state (see the module docstring)."""
        for node in self.nodes.ids:
            self.nodes.mark_started(node)
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        for entry in self.journal.replay():
            if not (
                self.topics.apply(entry) or self.txns.apply(entry) or self.offsets.apply(entry)
            ):
                log.warning("ignoring unknown journal entry %r", entry.get("t"))
        self.topics.finish_replay()
        self.journal.rewrite(
            self.topics.snapshot() + self.txns.snapshot() + self.offsets.snapshot()
        )
        self.txns.recover()

    def close(self) -> None:
        """Close files; in-memory state is dropped by the caller."""
        self.topics.close()
        self.journal.close()
        for fut in self._waiters:
            if not fut.done():
                fut.cancel()

    def notify_data(self) -> None:
        """Wake fetches waiting for new data (called after every append)."""
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait_for_data(self, timeout_s: float) -> None:
        """Wait until new data is appended or ``timeout_s`` passes."""
        if timeout_s <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            pass
