"""CPU seconds used by this process's tree (driver, Spark JVM, Python workers, broker).

On a shared machine wall-clock time depends on what else runs; the CPU time a job
consumes much less so. On a CPU-bound 2-core box, CPU seconds per epoch is what limits
throughput, so benchmarks report it next to wall time. Linux only (``/proc``); elsewhere
every reading is empty and the CPU columns stay blank.

Contract: :func:`snapshot` reads ``utime + stime`` of every live process descending from
this one (this one included), keyed by pid and split into ``"spark"`` (everything but
the broker) and ``"broker"`` (a ``minikafka`` process and its children);
:func:`used` subtracts two snapshots. Processes that start and exit between two
snapshots are not seen (Spark reuses its Python workers, so there are few).
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROC = Path("/proc")

Snapshot = dict[int, tuple[str, float]]  # pid -> (group, cpu seconds)


def _stat(pid: int) -> tuple[int, float] | None:
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
    ppid, utime, stime = int(fields[1]), int(fields[11]), int(fields[12])
    return ppid, (utime + stime) / _TICK


def _is_broker(pid: int) -> bool:
    try:
        return b"minikafka" in (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


def snapshot() -> Snapshot:
    """CPU seconds of every live process of this tree, with its group."""
    if not _PROC.is_dir():
        return {}
    stats: dict[int, tuple[int, float]] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            found = _stat(int(entry.name))
            if found is not None:
                stats[int(entry.name)] = found
    root = os.getpid()
    top: dict[int, int | None] = {root: root}  # pid -> its ancestor right below root

    def branch(pid: int) -> int | None:
        chain = []
        cur: int | None = pid
        while cur is not None and cur not in top:
            chain.append(cur)
            parent = stats[cur][0] if cur in stats else None
            if parent == root:
                top[cur] = cur
                chain.pop()
                break
            cur = parent if parent in stats else None
        found = top.get(cur) if cur is not None else None
        for c in chain:
            top[c] = found
        return found

    brokers = {pid for pid, (ppid, _) in stats.items() if ppid == root and _is_broker(pid)}
    out: Snapshot = {}
    for pid, (_ppid, cpu) in stats.items():
        b = branch(pid)
        if b is not None:
            out[pid] = ("broker" if b in brokers else "spark", cpu)
    return out


def used(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """CPU seconds per group between two snapshots (processes new in ``after`` count fully)."""
    out = {"spark": 0.0, "broker": 0.0}
    for pid, (group, cpu) in after.items():
        out[group] += cpu - before.get(pid, (group, 0.0))[1]
    return out
