"""What a standalone cluster reports: the master's JSON status and its executor processes.

The master's web UI serves ``/json/`` (workers with their state and cores, running
applications); executor JVMs are found in ``/proc`` by their main class and arguments
(``--app-id``, ``--executor-id``, ``--worker-url``), as the workers launch them. Linux only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@dataclass(frozen=True)
class WorkerStatus:
    """One worker as the master's JSON status reports it."""

    id: str
    host: str
    port: int
    state: str
    cores: int
    cores_used: int


@dataclass(frozen=True)
class AppStatus:
    """One running application as the master's JSON status reports it."""

    id: str
    name: str
    cores: int
    state: str


@dataclass(frozen=True)
class MasterStatus:
    """The master's JSON status: its workers and running applications."""

    url: str
    workers: tuple[WorkerStatus, ...]
    apps: tuple[AppStatus, ...]

    @property
    def alive_workers(self) -> tuple[WorkerStatus, ...]:
        """Workers in state ALIVE."""
        return tuple(w for w in self.workers if w.state == "ALIVE")

    @classmethod
    def parse(cls, doc: dict[str, Any]) -> MasterStatus:
        """Parse the master web UI's ``/json/`` document."""
        workers = tuple(
            WorkerStatus(
                str(w["id"]),
                str(w["host"]),
                int(w["port"]),
                str(w["state"]),
                int(w["cores"]),
                int(w["coresused"]),
            )
            for w in doc.get("workers", [])
        )
        apps = tuple(
            AppStatus(str(a["id"]), str(a["name"]), int(a["cores"]), str(a["state"]))
            for a in doc.get("activeapps", [])
        )
        return cls(str(doc.get("url", "")), workers, apps)


@dataclass(frozen=True)
class ExecutorProcess:
    """An executor JVM launched by one of the cluster's workers."""

    pid: int
    app_id: str
    executor_id: str
    worker_port: int


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def parent_pid(pid: int) -> int:
    """Return the parent of ``pid`` (0 if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the command name


def _arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args[:-1] else None


def executor_process(pid: int) -> ExecutorProcess | None:
    """Return ``pid`` as an executor JVM (None if it is not one, or is gone)."""
    return parse_executor_args(pid, _cmdline(pid))


def parse_executor_args(pid: int, args: list[str]) -> ExecutorProcess | None:
    """Parse an executor JVM's command line (None if ``args`` is not one)."""
    if EXECUTOR_CLASS not in args:
        return None
    app, exec_id, worker = (_arg(args, f) for f in ("--app-id", "--executor-id", "--worker-url"))
    if app is None or exec_id is None or worker is None:
        return None
    return ExecutorProcess(pid, app, exec_id, int(worker.rsplit(":", 1)[1]))
