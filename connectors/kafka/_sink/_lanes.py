"""Producer lanes: which of a partition's transactional ids this Python worker uses.

Why: Spark hands a task to whichever Python worker has been idle longest, so write
partition ``p`` moves between the workers of an executor in most epochs. With one
transactional id per partition, the worker that gets ``p`` must fence the producer the
other worker pooled. With lanes, partition ``p`` has ``producer_lanes`` worker lanes
``1 .. producer_lanes`` and the *shared lane* 0 (``SHARED_LANE``; ids:
``_names.transactional_id(sink_id, p, k)``). Each worker of a host claims one worker lane
``k`` for its life, so each worker keeps a live producer of every partition it wrote; no
worker claims the shared lane: redos, unaligned fresh opens and workers without a lane
write there. When and which lanes are fenced: docs/kafka-sink.md, "Producer lanes".

Contract of :meth:`LaneClaims.claim` (a worker's claims: its client pool's, ``_pool``):

1. at most one live process per host holds worker lane ``k`` (``1 .. lanes``) of a sink:
   an exclusive, non-blocking ``flock`` on
   ``<tmp>/kafka-eos-lanes/<digest(sink_id)>.<k>.lock``, kept open for the process's life
   (the OS releases it when the process exits, also on a crash); a process asks once per
   sink and keeps its answer;
2. when every worker lane is held (more workers than lanes on the host, or no
   ``fcntl``), the answer is the shared lane, unclaimed (asked again on the next call: a
   worker may have exited): safe (every rule of docs/kafka-sink.md holds on the shared
   lane) but its producers may be fenced by the redos and fresh opens that share it, and
   such a worker prepares nothing (``_prepare``). Spark may run more Python workers than
   task slots (a task that runs two Python operators at once, e.g. a Python UDF in the
   sink's stage, holds two) and hands tasks to all of them in turn, so the first time
   every lane is held a worker logs a warning naming ``producer_lanes`` (once per sink);
3. a forked child claims afresh (a lock held by the parent is not the child's).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no claims, the shared lane
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("connectors.kafka.sink.lanes")

# The lane no worker claims (id ``{sink_id}-{p}``): redos, unaligned fresh opens and workers
# without a lane write on it, so two such opens of one partition (a retry and a slow first
# attempt) fence each other on this lane's id, and no worker's pooled producer on its own
# lane is fenced by them except through a redo's fence of every lane.
SHARED_LANE = 0

# Directory of the lane lock files, under the host's temporary directory.
LOCK_DIR = "kafka-eos-lanes"


@dataclass(frozen=True)
class Lane:
    """A worker's lane of one sink: ``index`` in ``1 .. lanes`` if ``claimed``, else shared."""

    index: int
    claimed: bool


class LaneClaims:
    """The lanes this process holds, per sink (see the module docstring)."""

    def __init__(self, directory: Path | None = None) -> None:
        self._dir = directory or Path(tempfile.gettempdir()) / LOCK_DIR
        self._lock = threading.Lock()
        self._held: dict[str, tuple[Lane, IO[bytes] | None]] = {}
        self._warned: set[str] = set()  # sinks whose lanes this process found all held
        self._pid = os.getpid()

    def claim(self, sink_id: str, lanes: int) -> Lane:
        """Return this process's lane of ``sink_id`` (claimed on first use, kept)."""
        with self._lock:
            if os.getpid() != self._pid:  # forked: the parent's locks are not ours
                self._held.clear()
                self._warned.clear()
                self._pid = os.getpid()
            held = self._held.get(sink_id)
            if held is None or not held[0].claimed or held[0].index > lanes:
                if held is not None and held[1] is not None:
                    held[1].close()
                held = self._claim(sink_id, lanes)
                self._held[sink_id] = held
            return held[0]

    def _claim(self, sink_id: str, lanes: int) -> tuple[Lane, IO[bytes] | None]:
        if fcntl is None:
            return Lane(SHARED_LANE, claimed=False), None
        digest = hashlib.sha256(sink_id.encode()).hexdigest()[:20]
        with contextlib.suppress(OSError):
            self._dir.mkdir(parents=True, exist_ok=True)
        for index in range(1, lanes + 1):
            try:
                handle = (self._dir / f"{digest}.{index}.lock").open("ab")
            except OSError:
                return Lane(SHARED_LANE, claimed=False), None
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            return Lane(index, claimed=True), handle
        if sink_id not in self._warned:
            self._warned.add(sink_id)
            log.warning(
                "sink %s: all %d producer lanes on this host are held by other Python "
                "workers; this worker (pid %d) writes on the shared lane and prepares "
                "nothing, so the tasks Spark hands it initialize new producers. Set "
                "producer_lanes to the Python workers per executor (docs/kafka-sink.md, "
                "Producer lanes)",
                sink_id,
                lanes,
                os.getpid(),
            )
        return Lane(SHARED_LANE, claimed=False), None

    def release(self) -> None:
        """Give every lane of this process back (tests; workers keep theirs until exit)."""
        with self._lock:
            for _, handle in self._held.values():
                if handle is not None:
                    handle.close()
            self._held.clear()
