"""Running the end-to-end query (``connectors.demo.app``) as an application on the cluster.

The query, its input and its checks are the end-to-end tests' (``integration_tests.e2e``);
only the master and the driver's environment differ: ``PipelineConfig.master`` is the
cluster's URL and the driver process gets the cluster's environment (``SPARK_CONF_DIR``
with small executors and a loopback driver address).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

from connectors.demo.app import AppProcess, PipelineConfig
from integration_tests.cluster.conftest import ClusterTarget
from integration_tests.e2e._scenario import APP_RUN_TIMEOUT_S, Scenario
from integration_tests.support.spark_cluster import ExecutorProcess, StandaloneCluster

# Seconds to wait for a fault to fire (a task reaching its step) on a busy machine.
FAULT_WAIT_S = 240.0
# Seconds between checks for a fault's claim file.
POLL_S = 0.2


def cluster_config(scenario: Scenario, target: ClusterTarget, **overrides: Any) -> PipelineConfig:
    """The scenario's pipeline config with the cluster as master."""
    return scenario.config(master=target.master_url, **overrides)


def start_on_cluster(
    target: ClusterTarget, cfg: PipelineConfig, workdir: Path, name: str
) -> AppProcess:
    """Start the query as an application on the cluster (driver env from ``target``)."""
    with mock.patch.dict(os.environ, target.env):
        return AppProcess(cfg, workdir, name, allow_kill_app=True).start()


def run_on_cluster(
    scenario: Scenario,
    target: ClusterTarget,
    cfg: PipelineConfig,
    name: str,
    *,
    expect: int | None = 0,
) -> AppProcess:
    """Run the query to its exit; assert the exit code when ``expect`` is given."""
    app = start_on_cluster(target, cfg, scenario.tmp / "apps", name)
    code = app.wait(APP_RUN_TIMEOUT_S)
    if expect is not None:
        assert code == expect, (
            f"app {name} exited {code}, expected {expect}; errors:\n"
            f"{app.failure_summary()}\n(full log: {app.stderr_path})"
        )
    return app


def claim_pid(
    plan_path: str,
    fault_id: str,
    n: int = 0,
    *,
    app: AppProcess | None = None,
    timeout_s: float = FAULT_WAIT_S,
) -> int:
    """Wait until firing ``n`` of fault ``fault_id`` is claimed; return the claiming pid.

    The fault plan writes the pid of the process that fired (a Python worker) into the
    claim file ``{plan}.{id}.{n}``.
    """
    path = Path(f"{plan_path}.{fault_id}.{n}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text:
            return int(text)
        time.sleep(POLL_S)
    msg = f"fault {fault_id!r} firing {n} was not claimed within {timeout_s:.0f}s"
    if app is not None:
        msg += f"; app stderr:\n{app.stderr_tail()}"
    raise AssertionError(msg)


def executor_of(cluster: StandaloneCluster, pid: int) -> ExecutorProcess:
    """The executor JVM hosting process ``pid`` (a Python worker of a write task)."""
    exe = cluster.executor_hosting(pid)
    assert exe is not None, (
        f"process {pid} runs in none of the cluster's executors {cluster.executors()}"
    )
    return exe


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(POLL_S)
    raise AssertionError(f"{what} did not happen within {timeout_s:.0f}s")
