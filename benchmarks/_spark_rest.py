"""Spark's stage and task metrics from the driver's REST API (``/api/v1``), by time window.

Needs the web UI (``bench_session(ui=True)``). Jobs are assigned to a window (one
variant's epoch) by their submission time; each job's stages carry the task metrics
Spark itself records (scheduler delay, deserialization, run and CPU time, shuffle write
time, shuffle fetch wait, GC, result serialization, getting-result time).
"""

from __future__ import annotations

import json
import statistics
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# Seconds for one REST call to the local driver.
REST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class StageMetrics:
    """One stage of one epoch: wall times (ms) and task metrics summed or medianed."""

    stage_id: int
    kind: str  # "map (shuffle write)" or "result"
    tasks: int
    submitted: float  # wall-clock seconds
    first_launch: float
    completed: float
    task_ms_median: float
    scheduler_delay_ms_median: float
    deserialize_ms: float  # sums over the stage's tasks from here on
    run_ms: float
    cpu_ms: float
    gc_ms: float
    shuffle_write_ms: float
    shuffle_write_bytes: int
    shuffle_fetch_wait_ms: float
    shuffle_read_bytes: int
    result_serialize_ms: float
    getting_result_ms: float


@dataclass(frozen=True)
class JobMetrics:
    """One Spark job: wall times and its (non-skipped) stages."""

    job_id: int
    submitted: float
    completed: float
    stages: tuple[StageMetrics, ...]


def parse_time(text: str | None) -> float:
    """Seconds since the epoch of a REST API time (``2026-01-01T00:00:00.123GMT``)."""
    if not text:
        return float("nan")
    return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=REST_TIMEOUT_S) as answer:
        return json.load(answer)


def _stage(doc: Mapping[str, Any]) -> StageMetrics:
    tasks = [t for t in doc.get("tasks", {}).values() if t.get("status") == "SUCCESS"]
    metrics = [t.get("taskMetrics", {}) for t in tasks]

    def total(get: Any) -> float:
        return float(sum(get(m) for m in metrics))

    def median(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    return StageMetrics(
        stage_id=int(doc["stageId"]),
        kind="map (shuffle write)" if doc.get("shuffleWriteBytes", 0) else "result",
        tasks=len(tasks),
        submitted=parse_time(doc.get("submissionTime")),
        first_launch=parse_time(doc.get("firstTaskLaunchedTime")),
        completed=parse_time(doc.get("completionTime")),
        task_ms_median=median([float(t.get("duration", 0)) for t in tasks]),
        scheduler_delay_ms_median=median([float(t.get("schedulerDelay", 0)) for t in tasks]),
        deserialize_ms=total(lambda m: m.get("executorDeserializeTime", 0)),
        run_ms=total(lambda m: m.get("executorRunTime", 0)),
        cpu_ms=total(lambda m: m.get("executorCpuTime", 0)) / 1e6,
        gc_ms=total(lambda m: m.get("jvmGcTime", 0)),
        shuffle_write_ms=total(lambda m: m.get("shuffleWriteMetrics", {}).get("writeTime", 0))
        / 1e6,
        shuffle_write_bytes=int(doc.get("shuffleWriteBytes", 0)),
        shuffle_fetch_wait_ms=total(
            lambda m: m.get("shuffleReadMetrics", {}).get("fetchWaitTime", 0)
        ),
        shuffle_read_bytes=int(doc.get("shuffleReadBytes", 0)),
        result_serialize_ms=total(lambda m: m.get("resultSerializationTime", 0)),
        getting_result_ms=float(sum(t.get("gettingResultTime", 0) for t in tasks)),
    )


def jobs_in_windows(
    ui_url: str, windows: Mapping[Any, tuple[float, float]]
) -> dict[Any, list[JobMetrics]]:
    """Return the jobs submitted inside each ``(start, end)`` window, with stage metrics."""
    base = f"{ui_url.rstrip('/')}/api/v1/applications"
    app = _get(base)[0]["id"]
    jobs = _get(f"{base}/{app}/jobs")
    out: dict[Any, list[JobMetrics]] = {key: [] for key in windows}
    for job in sorted(jobs, key=lambda j: j["jobId"]):
        submitted = parse_time(job.get("submissionTime"))
        key = next((k for k, (s, e) in windows.items() if s <= submitted <= e), None)
        if key is None:
            continue
        stages = []
        for stage_id in job.get("stageIds", []):
            for attempt in _get(f"{base}/{app}/stages/{stage_id}?details=true"):
                if attempt.get("status") == "COMPLETE":
                    stages.append(_stage(attempt))
        out[key].append(
            JobMetrics(
                int(job["jobId"]), submitted, parse_time(job.get("completionTime")), tuple(stages)
            )
        )
    return out
