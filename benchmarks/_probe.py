"""Timestamps (and cProfile) around the steps of a KafkaSink epoch, without changing the sink.

The probes wrap functions of ``connectors.kafka`` in place (this process only) and append
one JSON line per call to ``{directory}/events-{pid}.jsonl``: ``{"name", "t0", "t1", "pid",
"epoch", "partition", "sink", ...}`` with wall-clock seconds, so driver, task and
librdkafka timestamps line up.

* :func:`install_driver_probes` (the driver process): the sink call, input check, slot
  check, epoch-log loads and appends (by record kind), ``prepare``, the write-stage Spark
  job, vote-server rounds and each vote's wait on the server; each event also counts the
  py4j round trips to the JVM made while it was the innermost probe (``py4j_calls``,
  ``py4j_s``: exclusive of nested probes);
* :func:`install_task_probes` (Spark Python workers, through
  ``benchmarks/_worker_site/sitecustomize.py`` with ``EOS_BENCH_PROBE_DIR`` set): the
  write task, each wait for the next Arrow batch from the JVM, the participant's steps
  (open, with whether a pooled producer was reused; marker read, begin, pre-commit, commit,
  close), the writer's validation, produce
  and flush, the checksum, and the vote round. A task of the epoch named in
  ``{directory}/cprofile-epoch`` also runs under cProfile (``task-{sink}-{epoch}-{p}.pstats``).

Nested steps overlap (``write`` contains the batch waits and the produce calls); readers
subtract where they need exclusive times.
"""

from __future__ import annotations

import cProfile
import functools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ENV_DIR = "EOS_BENCH_PROBE_DIR"
CPROFILE_EPOCH_FILE = "cprofile-epoch"
_context: dict[str, Any] = {}


class EventLog:
    """Appends probe events of this process to ``{directory}/events-{pid}.jsonl``."""

    def __init__(self, directory: str | Path, side: str) -> None:
        self._dir = Path(directory)
        self._side = side
        self._lock = threading.Lock()
        self._file: Any = None
        self._pid = -1

    def record(self, name: str, t0: float, t1: float, **extra: Any) -> None:
        """Append one event (with the task context of this process, if any)."""
        doc = {
            "name": name,
            "t0": t0,
            "t1": t1,
            "pid": os.getpid(),
            "side": self._side,
            **_context,
            **extra,
        }
        line = json.dumps(doc, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file is None or self._pid != os.getpid():  # forked: own file
                self._pid = os.getpid()
                self._dir.mkdir(parents=True, exist_ok=True)
                self._file = (self._dir / f"events-{self._pid}.jsonl").open("a", buffering=1)
            self._file.write(line)


class _Py4jMeter:
    """Counts py4j round trips (and their seconds) per innermost active probe, per thread."""

    def __init__(self) -> None:
        self._local = threading.local()

    def stack(self) -> list[list[Any]]:
        """This thread's active probes: ``[name, py4j calls, py4j seconds]``, innermost last."""
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack  # type: ignore[no-any-return]

    def install(self) -> None:
        """Wrap py4j's client-server ``send_command`` (one call = one round trip to the JVM)."""
        from py4j.clientserver import ClientServerConnection

        original = ClientServerConnection.send_command

        @functools.wraps(original)
        def send_command(conn: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(conn, command, *args, **kwargs)
            finally:
                stack = self.stack()
                if stack:
                    stack[-1][1] += 1
                    stack[-1][2] += time.perf_counter() - t0

        ClientServerConnection.send_command = send_command  # type: ignore[method-assign]
        self.installed = True


_PY4J = _Py4jMeter()


def install_py4j_meter() -> None:
    """Count py4j round trips per probe frame in this process (once)."""
    if not getattr(_PY4J, "installed", False):
        _PY4J.install()


def py4j_stack() -> list[list[Any]]:
    """This thread's probe frames ``[name, py4j calls, py4j seconds]``; push one to count."""
    return _PY4J.stack()


def _wrap(
    owner: Any,
    attr: str,
    log: EventLog,
    name: str | Callable[..., str],
    extra: Callable[..., dict[str, Any]] | None = None,
) -> None:
    original = getattr(owner, attr)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        label = name(*args, **kwargs) if callable(name) else name
        stack = _PY4J.stack()
        stack.append([label, 0, 0.0])
        t0 = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            t1 = time.time()
            _, calls, seconds = stack.pop()
            more = extra(*args, **kwargs) if extra is not None else {}
            if calls:
                more.update(py4j_calls=calls, py4j_s=seconds)
            log.record(label, t0, t1, **more)

    setattr(owner, attr, timed)


def _record_kind(_self: Any, record: Any, *_a: Any, **_k: Any) -> str:
    return f"log append {type(record).__name__}"


def install_driver_probes(directory: str | Path) -> EventLog:
    """Time the driver-side steps of every KafkaSink epoch of this process."""
    from connectors.kafka._sink import _epoch_log, _sink
    from connectors.stage import _execute, _jobs, _votes
    from connectors.stage import _sink as _stage_sink

    log = EventLog(directory, "driver")
    install_py4j_meter()
    _wrap(_sink.KafkaSink, "write", log, "sink write")
    _wrap(_stage_sink, "check_slots", log, "slot check")
    _wrap(_execute, "check_slots", log, "slot check")
    _wrap(_sink.KafkaConnector, "check_input", log, "input check")
    _wrap(_execute, "route", log, "prepare (routing plan)")
    _wrap(_jobs, "run_write_stage", log, "write stage job")
    _wrap(_sink.KafkaSink, "_vote_server", log, "vote server check")
    _wrap(_epoch_log.KafkaEpochLog, "append", log, _record_kind)
    _wrap(_epoch_log.KafkaEpochLog, "load", log, "log load")
    _wrap(_votes.VoteServer, "open_round", log, "vote round open")
    _wrap(_votes.VoteServer, "close_round", log, "vote round close")
    _wrap(_votes.VoteServer, "submit", log, "vote held on server")
    from pyspark.sql.classic.dataframe import DataFrame

    _wrap(DataFrame, "mapInArrow", log, "mapInArrow (UDF build)")
    _wrap(DataFrame, "collect", log, "collect (runs the job)")
    return log


def _timed_batches(batches: Iterator[Any], log: EventLog) -> Iterator[Any]:
    it = iter(batches)
    while True:
        t0 = time.time()
        try:
            batch = next(it)
        except StopIteration:
            log.record("batch wait", t0, time.time(), rows=0)
            return
        log.record("batch wait", t0, time.time(), rows=batch.num_rows)
        yield batch


def _profile_epoch(directory: Path) -> int | None:
    try:
        return int((directory / CPROFILE_EPOCH_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def install_task_probes(directory: str | Path) -> EventLog:
    """Time the task-side steps of every KafkaSink write task of this process."""
    from connectors.kafka._sink import _participant, _transactional, _writer
    from connectors.stage import _rows, _run, _task

    directory = Path(directory)
    log = EventLog(directory, "task")
    for participant in (
        _transactional.TransactionalKafkaParticipant,
        _participant.PlainKafkaParticipant,
    ):
        _wrap(
            participant,
            "__init__",
            log,
            "open",
            lambda self, *_a, **_k: {
                "reused": bool(getattr(self, "reused", False)),
                "why_new": str(getattr(self, "why_new", "")),
            },
        )
        for attr, name in (
            ("committed_marker", "marker read"),
            ("begin", "begin"),
            ("pre_commit", "pre-commit"),
            ("commit", "commit"),
            ("abort", "abort"),
            ("close", "close"),
            ("write", "write"),
        ):
            _wrap(participant, attr, log, name)
    _wrap(_writer.RecordWriter, "_validate", log, "validate")
    _wrap(_writer.RecordWriter, "_produce", log, "produce")
    _wrap(_writer.RecordWriter, "flush", log, "flush")
    _wrap(_writer.RecordWriter, "_serve", log, "serve (poll or flush)")
    _wrap(_rows.ArrowPartition, "_account", log, "checksum")
    _wrap(_task, "gather_votes", log, "vote round")
    original = _task.write_task

    @functools.wraps(original)
    def write_task(spec: Any, batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        _context.update(
            epoch=spec.plan.epoch,
            sink=spec.plan.sink_id,
            partition=int(ctx.partitionId()) if ctx is not None else -1,
        )
        profiler = cProfile.Profile() if _profile_epoch(directory) == spec.plan.epoch else None
        path = (
            directory / f"task-{spec.plan.sink_id}-{spec.plan.epoch}-{_context['partition']}.pstats"
        )
        t0 = time.time()
        if profiler is not None:
            profiler.enable()
        try:
            for out in original(spec, _timed_batches(batches, log)):
                # The task's one result: record before handing it over, since Spark may
                # not resume this generator until much later (or never).
                if profiler is not None:
                    profiler.disable()
                    profiler.dump_stats(str(path))
                    profiler = None
                log.record("task", t0, time.time())
                yield out
        finally:
            if profiler is not None:
                profiler.disable()
            _context.clear()

    # mapInArrow's function is pickled by reference to ``_task.write_task``: the worker
    # resolves that name, so the wrapper must replace it there (and in ``_run``).
    _task.write_task = write_task
    _run.write_task = write_task
    return log


def read_events(directory: str | Path) -> list[dict[str, Any]]:
    """Every event of every process, sorted by start time."""
    events: list[dict[str, Any]] = []
    for path in Path(directory).glob("events-*.jsonl"):
        with path.open() as f:
            events += [json.loads(line) for line in f if line.strip()]
    return sorted(events, key=lambda e: e["t0"])
