"""The standalone cluster manager itself: workers register, executors and workers come back.

One probe application (``_driver``) holds executors on the session's cluster while a test
kills one of them; the master must launch a replacement. Killing and restarting a whole
worker must end with every worker registered again.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from integration_tests.cluster._apps import wait_until
from integration_tests.cluster._driver import DriverProcess
from integration_tests.cluster.conftest import WORKERS, ClusterTarget
from integration_tests.support.spark_cluster import StandaloneCluster

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.timeout(600)]

# Seconds for executors to be launched and registered on a busy machine.
EXECUTOR_TIMEOUT_S = 120.0


def test_every_worker_registered(spark_cluster: ClusterTarget) -> None:
    cluster = spark_cluster.require_own()
    status = cluster.status()
    assert len(status.alive_workers) == WORKERS
    assert {w.port for w in status.alive_workers} == set(cluster.worker_ports())
    assert all(w.cores == 1 for w in status.alive_workers)


def test_killed_executor_is_replaced(spark_cluster: ClusterTarget, tmp_path: Path) -> None:
    cluster = spark_cluster.require_own()
    conf = {"spark.master": spark_cluster.master_url}
    with DriverProcess(conf, spark_cluster.env, tmp_path / "driver.log") as driver:
        assert driver.ask(f"wait {WORKERS}")["total"] == WORKERS
        before = cluster.executors(driver.app_id)
        assert len(before) == WORKERS and len({e.worker_port for e in before}) == WORKERS
        victim = before[0]
        os.kill(victim.pid, signal.SIGKILL)
        wait_until(
            lambda: (
                {e.executor_id for e in cluster.executors(driver.app_id)}
                - {e.executor_id for e in before}
                != set()
            ),
            EXECUTOR_TIMEOUT_S,
            "a replacement executor",
        )
        after = cluster.executors(driver.app_id)
        assert victim.pid not in {e.pid for e in after}
        assert victim.worker_port in {e.worker_port for e in after}  # the freed core is reused
        assert driver.ask(f"wait {WORKERS}")["total"] == WORKERS


def test_worker_restart_registers_again(spark_cluster: ClusterTarget) -> None:
    cluster = spark_cluster.require_own()
    old_port = cluster.worker_ports()[1]
    cluster.kill_worker(1)
    assert cluster.worker_ports()[1] is None
    wait_until(
        lambda: old_port not in {w.port for w in cluster.status().alive_workers},
        EXECUTOR_TIMEOUT_S,
        "the master noticing the dead worker",
    )
    cluster.restart_worker(1)
    alive = cluster.status().alive_workers
    assert len(alive) == WORKERS
    assert cluster.worker_ports()[1] in {w.port for w in alive}


def test_stop_kills_every_process(tmp_path: Path) -> None:
    # A cluster of its own (one worker) so stopping it leaves the session's cluster alone.
    cluster = StandaloneCluster(tmp_path / "c", workers=1).start()
    pids = cluster.daemon_pids()
    assert len(pids) == 2
    cluster.stop()
    cluster.stop()  # idempotent
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
