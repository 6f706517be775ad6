"""Producer lanes: which of a partition's transactional ids this Python worker uses.

Why: Spark hands a task to whichever Python worker has been idle longest, so write
partition ``p`` moves between the workers of an executor in most epochs. With one
transactional id per partition, the worker that gets ``p`` must fence the producer the
other worker pooled. With lanes, partition ``p`` has ``producer_lanes`` ids
(``_names.transactional_id(sink_id, p, k)``) and each worker of a host claims one lane
``k`` for its life, so each worker keeps a live producer of every partition it wrote.
When and which lanes are fenced: docs/kafka-sink.md, "Producer lanes".

Contract of :meth:`LaneClaims.claim` (a worker's claims: its client pool's, ``_pool``):

1. at most one live process per host holds lane ``k`` of a sink: an exclusive,
   non-blocking ``flock`` on ``<tmp>/kafka-eos-lanes/<digest(sink_id)>.<k>.lock``, kept
   open for the process's life (the OS releases it when the process exits, also on a
   crash); a process asks once per sink and keeps its answer;
2. when every lane is held (more workers than lanes on the host, or no ``fcntl``), the
   answer is lane 0 unclaimed (asked again on the next call: a worker may have exited): safe (lanes are an optimization, every rule of
   docs/kafka-sink.md holds for any lane) but the lane's producer may be fenced by its
   holder;
3. a forked child claims afresh (a lock held by the parent is not the child's).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lanes, lane 0 unclaimed
    fcntl = None  # type: ignore[assignment]

# The lane a redo (and an unaligned fresh open) writes on: two such opens of one partition
# (a retry and a slow first attempt) then fence each other on this lane's id.
REDO_LANE = 0

# Directory of the lane lock files, under the host's temporary directory.
LOCK_DIR = "kafka-eos-lanes"


@dataclass(frozen=True)
class Lane:
    """A worker's lane of one sink: ``index`` in ``0 .. lanes-1``; ``claimed`` False: shared."""

    index: int
    claimed: bool


class LaneClaims:
    """The lanes this process holds, per sink (see the module docstring)."""

    def __init__(self, directory: Path | None = None) -> None:
        self._dir = directory or Path(tempfile.gettempdir()) / LOCK_DIR
        self._lock = threading.Lock()
        self._held: dict[str, tuple[Lane, IO[bytes] | None]] = {}
        self._pid = os.getpid()

    def claim(self, sink_id: str, lanes: int) -> Lane:
        """Return this process's lane of ``sink_id`` (claimed on first use, kept)."""
        with self._lock:
            if os.getpid() != self._pid:  # forked: the parent's locks are not ours
                self._held.clear()
                self._pid = os.getpid()
            held = self._held.get(sink_id)
            if held is None or not held[0].claimed or held[0].index >= lanes:
                if held is not None and held[1] is not None:
                    held[1].close()
                held = self._claim(sink_id, lanes)
                self._held[sink_id] = held
            return held[0]

    def _claim(self, sink_id: str, lanes: int) -> tuple[Lane, IO[bytes] | None]:
        if fcntl is None:
            return Lane(0, claimed=False), None
        digest = hashlib.sha256(sink_id.encode()).hexdigest()[:20]
        with contextlib.suppress(OSError):
            self._dir.mkdir(parents=True, exist_ok=True)
        for index in range(lanes):
            try:
                handle = (self._dir / f"{digest}.{index}.lock").open("ab")
            except OSError:
                return Lane(0, claimed=False), None
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            return Lane(index, claimed=True), handle
        return Lane(0, claimed=False), None

    def release(self) -> None:
        """Give every lane of this process back (tests; workers keep theirs until exit)."""
        with self._lock:
            for _, handle in self._held.values():
                if handle is not None:
                    handle.close()
            self._held.clear()
