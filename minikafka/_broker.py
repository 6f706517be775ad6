"""Broker state: topics, transaction coordinator, group coordinator, data notifications.

All state is owned by the asyncio loop thread that runs the server; nothing here is
thread-safe and nothing needs to be.

Start-up protocol (``open``):
1. replay the metadata journal (topics, producer ids, transactions, group offsets);
2. open every partition log, rebuilding producer state, LSO and aborted index;
3. finish transactions the journal shows as PrepareCommit/PrepareAbort (write any
   missing markers, apply or drop pending transactional offsets);
4. rewrite the journal as a compact snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from ._config import BrokerConfig
from ._groups import GroupCoordinator
from ._journal import Journal
from ._topics import TopicRegistry
from ._txn import TransactionCoordinator

log = logging.getLogger("minikafka.broker")


class Broker:
    """The state of one single-node broker."""

    def __init__(self, config: BrokerConfig, data_dir: Path | None) -> None:
        self.config = config
        self.data_dir = data_dir
        journal_path = data_dir / "journal.bin" if data_dir is not None else None
        self.journal = Journal(journal_path, fsync=config.fsync_policy != "never")
        self.topics = TopicRegistry(config, data_dir, self.journal)
        self.txns = TransactionCoordinator(self)
        self.groups = GroupCoordinator(self)
        self.host = "127.0.0.1"
        self.port = 0
        self._waiters: list[asyncio.Future[None]] = []

    @staticmethod
    def now_ms() -> int:
        """Wall-clock milliseconds (persisted timestamps use wall time)."""
        return int(time.time() * 1000)

    def open(self) -> None:
        """Replay durable state (see the module docstring)."""
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        for entry in self.journal.replay():
            if not (self.topics.apply(entry) or self.txns.apply(entry) or self.groups.apply(entry)):
                log.warning("ignoring unknown journal entry %r", entry.get("t"))
        self.topics.finish_replay()
        self.journal.rewrite(self.topics.snapshot() + self.txns.snapshot() + self.groups.snapshot())
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
