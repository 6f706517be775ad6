"""A standalone Spark cluster on loopback for tests, from pyspark's own ``bin/spark-class``.

Contract of :class:`StandaloneCluster`:

1. :meth:`~StandaloneCluster.start` runs one master and ``workers`` workers (``cores`` each,
   one by default, so every executor is a JVM of its own with its own Python workers) on
   127.0.0.1 with free ports, each in a process group of its own, with its work, local and
   log directories under ``base_dir``; it returns once the master's JSON status (its web
   UI, ``/json/``) lists every worker ``ALIVE``;
2. applications connect with :attr:`~StandaloneCluster.master_url` and
   :meth:`~StandaloneCluster.app_conf` (small executors, the driver on loopback), or start
   a pyspark driver in the environment of :meth:`~StandaloneCluster.app_env`, whose
   ``spark-defaults.conf`` carries the same settings;
3. :meth:`~StandaloneCluster.executors` lists the executor JVMs the workers launched (pid,
   application, executor id) so a test can SIGKILL one; the worker notices and the master
   launches a replacement; :meth:`~StandaloneCluster.executor_hosting` maps any process of
   an executor (a Python worker, say from a fault plan's claim file) to its JVM;
4. :meth:`~StandaloneCluster.kill_worker` SIGKILLs a worker with its executors;
   :meth:`~StandaloneCluster.restart_worker` starts it again on new ports and waits until it
   registered;
5. :meth:`~StandaloneCluster.stop` (also the context manager's exit) SIGTERMs, then
   SIGKILLs, every process group it started. Idempotent.

Not guaranteed: ports are found free just before use (another process may take one in
between; start then fails with :class:`ClusterStartError`). Linux only (``/proc``).

:func:`cluster_master_url` returns ``SPARK_MASTER_URL`` when set: tests then use that
cluster instead of starting one (like ``KAFKA_BOOTSTRAP_SERVERS`` for Kafka).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import pyspark

from integration_tests.support._cluster_status import (
    AppStatus,
    ExecutorProcess,
    MasterStatus,
    WorkerStatus,
    executor_process,
    parent_pid,
)

__all__ = [
    "AppStatus",
    "ClusterStartError",
    "ExecutorProcess",
    "MasterStatus",
    "StandaloneCluster",
    "WorkerStatus",
    "cluster_master_url",
    "free_port",
    "spark_home",
]

# Environment variable naming an existing cluster (``spark://host:port``) to use instead.
MASTER_URL_ENV = "SPARK_MASTER_URL"
LOOPBACK = "127.0.0.1"
# Seconds for the master's web UI to answer and for workers to register: each is a JVM
# start, slow on a busy 2-core machine.
REGISTER_TIMEOUT_S = 180.0
# Seconds between polls of the master's JSON status.
POLL_INTERVAL_S = 0.5
# Seconds one HTTP request to the master's web UI may take.
HTTP_TIMEOUT_S = 5.0
# Seconds a daemon gets to exit after SIGTERM before its process group is SIGKILLed.
STOP_GRACE_S = 10.0
# Seconds between Spark's checks that a barrier stage has enough slots (Spark's default is
# 15 s): a barrier write stage re-run after a lost executor waits for the replacement.
BARRIER_CHECK_INTERVAL = "2s"
# Memory a worker offers and an executor takes: small, the machine is shared.
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "512m"
_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class ClusterStartError(RuntimeError):
    """The cluster did not come up; the message names the daemon and its log file."""


def cluster_master_url() -> str | None:
    """Return ``SPARK_MASTER_URL`` (an existing cluster to use), or None to start one."""
    return os.environ.get(MASTER_URL_ENV) or None


def spark_home() -> Path:
    """Return the Spark installation of the installed pyspark package (or ``SPARK_HOME``).

    Raises:
        ClusterStartError: neither has ``bin/spark-class``.

    """
    for candidate in (os.environ.get("SPARK_HOME"), str(Path(pyspark.__file__).parent)):
        if candidate and (Path(candidate) / "bin" / "spark-class").is_file():
            return Path(candidate)
    msg = "no bin/spark-class in SPARK_HOME nor in the pyspark package; reinstall pyspark"
    raise ClusterStartError(msg)


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port that is free on ``host`` right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class _Daemon:
    """One started master or worker: its process and the ports it listens on."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None


class StandaloneCluster:
    """A master and workers on loopback (see the module docstring for the contract)."""

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        workers: int = 2,
        *,
        cores: int = 1,
        worker_memory: str = WORKER_MEMORY,
        executor_memory: str = EXECUTOR_MEMORY,
        python: str = sys.executable,
    ) -> None:
        if workers < 1 or cores < 1:
            msg = f"a cluster needs workers >= 1 and cores >= 1, got {workers} and {cores}"
            raise ValueError(msg)
        self.base_dir = Path(base_dir)
        self.worker_count = workers
        self.cores = cores
        self.worker_memory = worker_memory
        self.executor_memory = executor_memory
        self.python = python
        self._master: _Daemon | None = None
        self._web_port = 0
        self._workers: list[_Daemon | None] = [None] * workers
        self._starts = 0

    # -- addresses and client settings ---------------------------------------------------
    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:port`` of the running master."""
        return f"spark://{LOOPBACK}:{self._require_master().port}"

    @property
    def web_ui_url(self) -> str:
        """The master's web UI (its JSON status is at ``/json/``)."""
        self._require_master()
        return f"http://{LOOPBACK}:{self._web_port}"

    @property
    def conf_dir(self) -> Path:
        """Directory holding the applications' ``spark-defaults.conf`` (see :meth:`app_env`)."""
        return self.base_dir / "conf"

    def app_conf(self) -> dict[str, str]:
        """Spark settings for an application on this cluster (small executors, loopback)."""
        return {
            "spark.master": self.master_url,
            "spark.executor.memory": self.executor_memory,
            "spark.executor.cores": str(self.cores),
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.pyspark.python": self.python,
            "spark.pyspark.driver.python": self.python,
            "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": BARRIER_CHECK_INTERVAL,
        }

    def app_env(self) -> dict[str, str]:
        """Environment for a pyspark driver process on this cluster.

        ``SPARK_CONF_DIR`` points at a ``spark-defaults.conf`` holding :meth:`app_conf`, so
        a driver that sets only the master (``connectors.demo.app`` with ``master=...``) still
        gets small executors and a loopback driver address.
        """
        return {
            "SPARK_CONF_DIR": str(self.conf_dir),
            "SPARK_LOCAL_IP": LOOPBACK,
            "PYSPARK_PYTHON": self.python,
            "PYSPARK_DRIVER_PYTHON": self.python,
        }

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> StandaloneCluster:
        """Start the master and every worker; wait until all registered (contract 1)."""
        try:
            self._start_master()
            for i in range(self.worker_count):
                self._start_worker(i)
            self.wait_registered()
        except BaseException:
            self.stop()
            raise
        self._write_app_conf()
        return self

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL, every process group this cluster started. Idempotent."""
        daemons = [d for d in [*self._workers, self._master] if d is not None]
        self._workers = [None] * self.worker_count
        self._master = None
        for daemon in daemons:
            _signal_group(daemon.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for daemon in daemons:
            try:
                daemon.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(daemon.proc.pid, signal.SIGKILL)  # executors live in the group too
            daemon.proc.wait()

    def status(self) -> MasterStatus:
        """Return the master's JSON status (workers, running applications)."""
        url = f"{self.web_ui_url}/json/"
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as resp:
            return MasterStatus.parse(json.loads(resp.read()))

    def wait_registered(self, timeout_s: float = REGISTER_TIMEOUT_S) -> MasterStatus:
        """Wait until every running worker of this cluster is ALIVE at the master.

        Raises:
            ClusterStartError: a daemon exited, or the workers did not register in time.

        """
        deadline = time.monotonic() + timeout_s
        last: MasterStatus | None = None
        while time.monotonic() < deadline:
            self._check_running()
            try:
                last = self.status()
            except (OSError, ValueError):  # the web UI is not up yet
                time.sleep(POLL_INTERVAL_S)
                continue
            alive = {w.port for w in last.alive_workers}
            if all(d.port in alive for d in self._workers if d is not None):
                return last
            time.sleep(POLL_INTERVAL_S)
        msg = (
            f"workers did not register with the master within {timeout_s:.0f}s (last "
            f"status: {last}); see the logs in {self.base_dir / 'logs'}"
        )
        raise ClusterStartError(msg)

    # -- faults --------------------------------------------------------------------------
    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` and the executors it launched (its process group)."""
        daemon = self._workers[index]
        if daemon is None:
            return
        self._workers[index] = None
        _signal_group(daemon.proc.pid, signal.SIGKILL)
        daemon.proc.wait()

    def restart_worker(self, index: int, timeout_s: float = REGISTER_TIMEOUT_S) -> None:
        """Kill worker ``index`` if it runs, start it on new ports, wait until registered."""
        self.kill_worker(index)
        self._start_worker(index)
        self.wait_registered(timeout_s)

    def daemon_pids(self) -> list[int]:
        """Return the pids of the running master and workers (each leads its process group)."""
        return [d.proc.pid for d in [self._master, *self._workers] if d is not None]

    def worker_ports(self) -> list[int | None]:
        """RPC port of each worker (None: killed and not restarted)."""
        return [d.port if d is not None else None for d in self._workers]

    def executors(self, app_id: str | None = None) -> list[ExecutorProcess]:
        """Executor JVMs launched by this cluster's running workers (of ``app_id`` if given)."""
        ports = {d.port for d in self._workers if d is not None}
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                exe = executor_process(int(entry.name))
                if exe is not None and exe.worker_port in ports and app_id in (None, exe.app_id):
                    found.append(exe)
        return sorted(found, key=lambda e: (e.app_id, int(e.executor_id)))

    def executor_hosting(self, pid: int) -> ExecutorProcess | None:
        """Return the executor JVM that ``pid`` (e.g. a Python worker) descends from."""
        ours = {e.pid: e for e in self.executors()}
        while pid > 1:
            if pid in ours:
                return ours[pid]
            pid = parent_pid(pid)
        return None

    # -- internals -----------------------------------------------------------------------
    def _require_master(self) -> _Daemon:
        if self._master is None:
            msg = "the cluster is not running; call start() first"
            raise ClusterStartError(msg)
        return self._master

    def _check_running(self) -> None:
        for daemon in [self._master, *self._workers]:
            if daemon is not None and not daemon.alive():
                msg = f"{daemon.name} exited with code {daemon.proc.returncode}; see {daemon.log}"
                raise ClusterStartError(msg)

    def _spawn(
        self,
        name: str,
        cls: str,
        args: list[str],
        port: int,
        extra_env: dict[str, str] | None = None,
    ) -> _Daemon:
        logs = self.base_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        conf = self.base_dir / "daemon-conf"  # empty: no stray spark-defaults.conf applies
        conf.mkdir(parents=True, exist_ok=True)
        self._starts += 1
        log = logs / f"{name}.{self._starts}.log"
        env = {
            **os.environ,
            "SPARK_CONF_DIR": str(conf),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOG_DIR": str(logs),
            "PYSPARK_PYTHON": self.python,
            "SPARK_NO_DAEMONIZE": "1",
            **(extra_env or {}),
        }
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), cls, *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        return _Daemon(name, proc, port, log)

    def _start_master(self) -> None:
        port, self._web_port = free_port(), free_port()
        self._master = self._spawn(
            "master",
            _MASTER_CLASS,
            [
                "--host",
                LOOPBACK,
                "--port",
                str(port),
                "--webui-port",
                str(self._web_port),
            ],
            port,
        )

    def _start_worker(self, index: int) -> None:
        home = self.base_dir / f"worker-{index}"
        (home / "local").mkdir(parents=True, exist_ok=True)
        port = free_port()
        args = [
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
            "--cores",
            str(self.cores),
            "--memory",
            self.worker_memory,
            "--work-dir",
            str(home / "work"),
            self.master_url,
        ]
        self._workers[index] = self._spawn(
            f"worker-{index}", _WORKER_CLASS, args, port, {"SPARK_LOCAL_DIRS": str(home / "local")}
        )

    def _write_app_conf(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        lines = [f"{k} {v}" for k, v in sorted(self.app_conf().items())]
        (self.conf_dir / "spark-defaults.conf").write_text("\n".join(lines) + "\n")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
