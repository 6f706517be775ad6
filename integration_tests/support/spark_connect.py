"""A Spark Connect server on loopback for tests, from the pyspark package's own jars.

pyspark ships the server (``jars/spark-connect_*.jar``) and ``sbin/start-connect-server.sh``,
which daemonizes through ``spark-daemon.sh``. :class:`ConnectServer` runs the same thing in
the foreground instead, ``bin/spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` (spark-submit knows that class
and needs no application jar), so that the test owns the process.

Contract:

1. :meth:`~ConnectServer.start` runs the server in a process group of its own on 127.0.0.1
   and a free port, its Spark application on ``master`` (``local[2]`` by default, or a
   standalone cluster's URL), Python workers and server-side ``foreachBatch`` processes on
   ``python``; it returns once the gRPC port accepts connections;
2. clients connect with :attr:`~ConnectServer.url` (``sc://127.0.0.1:port``);
3. :meth:`~ConnectServer.stop` (and the context manager's exit) SIGTERMs, then SIGKILLs,
   the process group. Idempotent.

:func:`connect_server_url` returns ``SPARK_CONNECT_URL`` when set: tests then use that
server instead of starting one.

Note for clients: ``SparkSession.builder.remote(url)`` sets
``SPARK_CONNECT_MODE_ENABLED=1`` in its process, which turns every later PySpark session
of that process into a Connect one; run Connect clients in processes of their own.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from integration_tests.support.spark_cluster import (
    LOOPBACK,
    ClusterStartError,
    free_port,
    spark_home,
)

# Environment variable naming an existing Connect server (``sc://host:port``) to use instead.
CONNECT_URL_ENV = "SPARK_CONNECT_URL"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Seconds for the server to answer: a JVM and a SparkContext start, slow on a busy machine.
START_TIMEOUT_S = 180.0
# Seconds between connection attempts while waiting.
POLL_INTERVAL_S = 0.5
# Seconds the server gets to exit after SIGTERM before its process group is SIGKILLed.
STOP_GRACE_S = 15.0
DRIVER_MEMORY = "1g"
# Seconds the server waits for a Python process it starts (a streaming ``foreachBatch``
# function's) to connect back and take its function (Spark's
# spark.python.authenticate.socketTimeout, 15 s by default). That process imports pyspark
# and the sink's connector and opens a Connect session first: over 15 s on a loaded 2-core
# machine, and the query then fails with a timeout instead of the error a test expects.
PYTHON_CONNECT_BACK_TIMEOUT_S = 180


def connect_server_url() -> str | None:
    """Return ``SPARK_CONNECT_URL`` (an existing server to use), or None to start one."""
    return os.environ.get(CONNECT_URL_ENV) or None


class ConnectServer:
    """A Spark Connect server subprocess (see the module docstring for the contract)."""

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        *,
        master: str = "local[2]",
        conf: dict[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.master = master
        self.conf = dict(conf or {})
        self.python = python
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self.log = self.base_dir / "connect-server.log"

    @property
    def url(self) -> str:
        """``sc://127.0.0.1:port`` of the running server."""
        if self._proc is None:
            msg = "the Connect server is not running; call start() first"
            raise ClusterStartError(msg)
        return f"sc://{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        """Return the spark-submit command line that runs the server in the foreground."""
        conf = {
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.driver.memory": DRIVER_MEMORY,
            "spark.ui.enabled": "false",
            "spark.pyspark.python": self.python,
            "spark.pyspark.driver.python": self.python,
            "spark.python.authenticate.socketTimeout": f"{PYTHON_CONNECT_BACK_TIMEOUT_S}s",
            **self.conf,
        }
        args = [
            str(spark_home() / "bin" / "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--name",
            "eos Spark Connect server",
            "--master",
            self.master,
        ]
        for key, value in sorted(conf.items()):
            args += ["--conf", f"{key}={value}"]
        return args

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ConnectServer:
        """Start the server and wait until its port accepts connections (contract 1).

        Raises:
            ClusterStartError: the server exited or did not answer in time.

        """
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        env = {
            **os.environ,
            "SPARK_LOCAL_IP": LOOPBACK,
            "PYSPARK_PYTHON": self.python,
            "PYSPARK_DRIVER_PYTHON": self.python,
            "SPARK_CONF_DIR": str(self.base_dir / "conf"),
        }
        (self.base_dir / "conf").mkdir(exist_ok=True)  # empty: no stray spark-defaults.conf
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        env.pop("SPARK_REMOTE", None)
        with self.log.open("wb") as out:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                msg = (
                    f"the Spark Connect server exited with code {self._proc.returncode}; "
                    f"see {self.log}"
                )
                raise ClusterStartError(msg)
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=POLL_INTERVAL_S):
                    return
            except OSError:
                time.sleep(POLL_INTERVAL_S)
        msg = f"the Spark Connect server did not answer within {timeout_s:.0f}s; see {self.log}"
        raise ClusterStartError(msg)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL, the server's process group. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
