"""The measured jobs of ``benchmarks.bench_job`` and their summary per variant.

A job's batch ``b`` takes from the end of batch ``b - 1`` to its own end; the first
``excluded`` batches are its start-up (from ``query.start()`` to the end of the last of
them). :func:`summarize` turns the jobs (and the broker requests of the run) into one
:class:`Summary` per variant, with ratios between variants of the same run.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from benchmarks import _requests
from benchmarks._job import ALL_VARIANTS
from benchmarks._targets import SetupCounts, setup_requests


@dataclass(frozen=True)
class Batch:
    """One micro-batch of one variant's job: when its write started and ended."""

    variant: str
    round: int
    batch_id: int
    start: float  # time.time()
    end: float
    cpu_s: float = float("nan")  # CPU since the previous batch's end (driver, JVM, workers)


@dataclass(frozen=True)
class JobRun:
    """One variant's job: when it was started and its batches."""

    variant: str
    round: int
    started: float  # time.time() just before query.start()
    batches: tuple[Batch, ...]

    def steady(self, excluded: int) -> list[tuple[Batch, float]]:
        """The measured batches with their times (end of the previous batch to own end)."""
        ordered = sorted(self.batches, key=lambda b: b.batch_id)
        return [
            (b, b.end - prev.end)
            for prev, b in zip(ordered, ordered[1:], strict=False)
            if b.batch_id >= excluded
        ]

    def startup_s(self, excluded: int) -> float | None:
        """Seconds from query start to the end of the last excluded batch."""
        ends = [b.end for b in self.batches if b.batch_id == excluded - 1]
        return ends[0] - self.started if ends else None


@dataclass(frozen=True)
class Summary:
    """One variant over its jobs."""

    variant: str
    batches: int
    median_ms: float
    rows_per_s: float
    startup_s: float | None
    cpu_ms: float | None
    x_arrow: float | None = None
    x_arrow_produce: float | None = None
    x_alo: float | None = None
    x_baseline: float | None = None
    x_noop: float | None = None
    startup_vs_baseline_s: float | None = None
    steady_requests: dict[str, dict[str, float]] = field(default_factory=dict)
    startup_requests: dict[str, dict[str, float]] = field(default_factory=dict)
    setup_requests: SetupCounts | None = None  # write tasks' set-up requests of each steady batch


def _by_side(reqs: Sequence[_requests.Request], n: int) -> dict[str, dict[str, float]]:
    sides: dict[str, Counter[str]] = {"driver": Counter(), "tasks": Counter()}
    for r in reqs:
        sides["driver" if r.role in _requests.DRIVER_ROLES else "tasks"][r.api] += 1
    return {s: {api: c / max(1, n) for api, c in sorted(cs.items())} for s, cs in sides.items()}


def summarize(
    runs: Sequence[JobRun],
    rows: int,
    excluded: int,
    requests: Sequence[_requests.Request] | None,
) -> list[Summary]:
    """One summary per variant, with its ratios to the ceilings and the baseline."""
    base: dict[str, Summary] = {}
    for variant in [v for v in ALL_VARIANTS if any(r.variant == v for r in runs)]:
        mine = [r for r in runs if r.variant == variant]
        steady = [bt for r in mine for bt in r.steady(excluded)]
        if not steady:
            continue
        median_s = statistics.median(t for _b, t in steady)
        startups = [s for r in mine if (s := r.startup_s(excluded)) is not None]
        cpus = [b.cpu_s for b, _t in steady if b.cpu_s == b.cpu_s]
        steady_reqs: dict[str, dict[str, float]] = {}
        startup_reqs: dict[str, dict[str, float]] = {}
        setup = None
        if requests is not None:
            windows = {
                (r.round, b.batch_id): (b.end - t, b.end)
                for r in mine
                for b, t in r.steady(excluded)
            }
            per_batch = _requests.split_by_window(requests, windows)
            flat = [q for qs in per_batch.values() for q in qs]
            steady_reqs = _by_side(flat, len(per_batch))
            setup = SetupCounts(tuple(setup_requests(qs) for qs in per_batch.values()))
            starts = {
                r.round: (r.started, r.started + s)
                for r in mine
                if (s := r.startup_s(excluded)) is not None
            }
            in_startup = _requests.split_by_window(requests, starts)
            startup_reqs = _by_side(
                [q for qs in in_startup.values() for q in qs], max(1, len(in_startup))
            )
        base[variant] = Summary(
            variant,
            len(steady),
            1000.0 * median_s,
            rows / median_s,
            statistics.median(startups) if startups else None,
            1000.0 * statistics.median(cpus) if cpus else None,
            steady_requests=steady_reqs,
            startup_requests=startup_reqs,
            setup_requests=setup,
        )

    def ratio(s: Summary, other: str) -> float | None:
        o = base.get(other)
        return None if o is None else s.rows_per_s / o.rows_per_s

    out = []
    for s in base.values():
        b = base.get("baseline")
        extra = (
            None
            if b is None or s.startup_s is None or b.startup_s is None
            else s.startup_s - b.startup_s
        )
        out.append(
            replace(
                s,
                x_arrow=ratio(s, "arrow-drop"),
                x_arrow_produce=ratio(s, "arrow-produce"),
                x_alo=ratio(s, "alo-sink"),
                x_baseline=ratio(s, "baseline"),
                x_noop=ratio(s, "noop"),
                startup_vs_baseline_s=extra,
            )
        )
    return out
