"""Pure helpers of ``benchmarks.soak_memory``: resident memory of processes, growth of a series.

Linux only (``/proc``): elsewhere every reading is None and the soak reports nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

_PROC = Path("/proc")


def rss_mib(pid: int) -> float | None:
    """Resident set size of ``pid`` in MiB (``VmRSS``); None if it is gone or unknown."""
    try:
        status = (_PROC / str(pid) / "status").read_text()
    except OSError:
        return None
    return parse_vmrss_kib(status) / 1024.0 if "VmRSS:" in status else None


def parse_vmrss_kib(status: str) -> float:
    """The ``VmRSS`` of a ``/proc/<pid>/status`` text, in KiB (0.0 when absent: a zombie)."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1])
    return 0.0


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root``: pid -> its command line (arguments joined by spaces)."""
    parents: dict[int, int] = {}
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        if entry.name.isdigit():
            try:
                raw = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(raw[raw.rindex(")") + 2 :].split()[1])
    out: dict[int, str] = {}
    for pid in parents:
        cur = parents.get(pid)
        while cur is not None and cur != root and cur in parents:
            cur = parents[cur]
        if cur == root:
            try:
                cmd = (_PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            out[pid] = cmd.decode(errors="replace").strip()
    return out


def growth_pct(series: Sequence[tuple[float, float]], after_minutes: float) -> float | None:
    """Growth of ``(minute, value)`` samples from the first at or after ``after_minutes`` to the last.

    In percent of that first value; None when no sample is that late, when it is the last
    one, or when its value is not positive.
    """
    later = [(m, v) for m, v in series if m >= after_minutes]
    if len(later) < 2 or later[0][1] <= 0:
        return None
    return 100.0 * (later[-1][1] - later[0][1]) / later[0][1]
