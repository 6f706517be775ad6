"""End-to-end chaos on a standalone cluster: executor JVMs and workers die, the driver restarts.

Same query, input and checks as ``integration_tests/e2e`` (100 records per epoch, 12 keys,
verified by ``connectors.verify``), run as a Spark application on the session's
cluster: two workers of one core, so write tasks run in two executor JVMs. Every epoch goes
to both sinks at once (``sink="kafka+postgres"``, one ``CompositeSink`` epoch): the topic
through ``KafkaSink`` and a table through ``PostgresSink`` (two-phase commit when aligned, the
idempotency table when unaligned). Aligned mode gives each sink one write partition, so the
barrier stage's two tasks fit the cluster's two slots; unaligned mode gives each two. The faults come from outside the
application, as when a cluster loses machines, one per epoch:

* ``executor_mid_write``: both write tasks are held in the middle of their rows
  (transactions open) and the executor JVM of one is SIGKILLed; its worker reports the
  loss and the master launches a replacement executor;
* ``executor_mid_vote`` (aligned only): write task 1 pre-commits and sends its vote while
  task 0 is held before voting; task 1's executor JVM is SIGKILLed while it waits for the
  decision;
* ``worker_mid_write``: both tasks held mid-write, the whole worker of one (worker JVM and
  executor) is SIGKILLed, then started again and re-registers;
* ``driver_mid_write``: both tasks held mid-write, the driver application is SIGKILLed and a
  new one restarts from the checkpoint.

In unaligned mode Spark retries the lost task itself; in aligned mode the write stage is a
barrier stage, which Spark does not retry, so the sink re-runs it (``stage_retries``) once
the cluster has two free slots again. Which executor to kill is found from the fault plan:
the claim file of the holding fault names the Python worker holding the task, whose
ancestor is the executor JVM (``StandaloneCluster.executor_hosting``).

A held task waits on an event, not a clock: its fault is an ``await`` gate whose release
(``go-e{epoch}``, a fault the query itself never reaches) the test claims once the fault was
delivered and the replacement executor launched, so the surviving task carries on at once
instead of sleeping out a fixed hold.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.demo.app import AppProcess
from connectors.demo.app._config import member_ids
from connectors.kafka import DEFAULT_EPOCH_LOG_TOPIC
from connectors.verify import load_history, member_history
from integration_tests.cluster._apps import (
    claim_pid,
    cluster_config,
    executor_of,
    run_on_cluster,
    start_on_cluster,
    wait_until,
)
from integration_tests.cluster.conftest import ClusterTarget
from integration_tests.e2e._scenario import CHUNK, Scenario, assert_exact, fired
from integration_tests.e2e._table_side import TableSide
from integration_tests.support.spark_cluster import StandaloneCluster

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.timeout(900)]

# Seconds a held task waits at most for the test to release it (it is released once the
# fault is delivered; the bound only ends the hold of a test that failed meanwhile).
HOLD_S = 240.0
# Epoch no query reaches: the release faults (``go-e{epoch}``) live there.
NEVER = 10**6
# Seconds a task that waits for votes is given to send its vote before its executor dies.
VOTE_SEND_S = 3.0
# Seconds for a replacement executor (or a restarted worker's) to be launched.
REPLACE_TIMEOUT_S = 120.0
# The faults of each mode, one per epoch from epoch 1 on (epoch 0 runs clean).
SCHEDULES = {
    "unaligned": ("executor_mid_write", "worker_mid_write", "driver_mid_write"),
    "aligned": ("executor_mid_write", "executor_mid_vote", "worker_mid_write", "driver_mid_write"),
}
# Write partitions per sink: aligned runs all 2 x P tasks at once on the cluster's 2 slots.
PARALLELISM = {"unaligned": 2, "aligned": 1}


def _release_id(epoch: int) -> str:
    return f"go-e{epoch}"


def _faults(kind: str, epoch: int) -> list[dict[str, Any]]:
    """Fault plan entries holding the tasks of ``epoch`` where ``kind`` strikes.

    The held tasks wait for the release fault, which only the test claims (``_release``).
    """
    hold = {"action": "await", "waits_for": _release_id(epoch), "seconds": HOLD_S}
    release = {"id": _release_id(epoch), "step": "mid_write", "epoch": NEVER, "action": "raise"}
    if kind == "executor_mid_vote":
        return [
            {
                "id": f"e{epoch}",
                "step": "after_pre_commit",
                "epoch": epoch,
                "partition": 1,
                "action": "sleep",
                "seconds": 0.01,
            },
            {
                "id": f"e{epoch}-held",
                "step": "after_pre_commit",
                "epoch": epoch,
                "partition": 0,
                **hold,
            },
            release,
        ]
    return [
        {
            "id": f"e{epoch}",
            "step": "mid_write",
            "epoch": epoch,
            "after_rows": 10,
            "times": 2,
            **hold,
        },
        release,
    ]


def _release(plan: str, epoch: int) -> None:
    """Let the held tasks of ``epoch`` carry on (claims the fault their gate waits for)."""
    Path(f"{plan}.{_release_id(epoch)}.0").write_text("released by the test")


def _replacement_launched(
    cluster: StandaloneCluster, app_id: str, lost: set[str]
) -> Callable[[], bool]:
    def launched() -> bool:
        return any(e.executor_id not in lost for e in cluster.executors(app_id))

    return launched


def _strike(kind: str, epoch: int, plan: str, cluster: StandaloneCluster, app: AppProcess) -> None:
    """Wait until ``epoch``'s tasks are held, then deliver fault ``kind``."""
    victim = executor_of(cluster, claim_pid(plan, f"e{epoch}", 0))
    lost = {e.executor_id for e in cluster.executors(victim.app_id)}
    if kind == "executor_mid_vote":
        time.sleep(VOTE_SEND_S)  # the task sends its vote at once, then waits for the others
    if kind == "driver_mid_write":
        app.kill()
        _release(plan, epoch)  # the restart redoes the epoch without a hold
        return
    if kind == "worker_mid_write":
        index = cluster.worker_ports().index(victim.worker_port)
        cluster.kill_worker(index)
        cluster.restart_worker(index)
    else:
        os.kill(victim.pid, signal.SIGKILL)
    wait_until(
        _replacement_launched(cluster, victim.app_id, lost),
        REPLACE_TIMEOUT_S,
        f"a new executor after {kind} in epoch {epoch}",
    )
    _release(plan, epoch)


@pytest.fixture
def scenario(
    kafka_bootstrap: str,
    tmp_path: Path,
    new_topic: Callable[..., str],
    request: pytest.FixtureRequest,
    schema: str,
) -> Scenario:
    epochs = 1 + len(SCHEDULES[request.node.callspec.params["mode"]])
    sc = Scenario.create(kafka_bootstrap, tmp_path, new_topic, n=epochs * CHUNK)
    sc.sink_id = f"{schema}-mix"  # the schema fixture rolls back this sink's prepared leftovers
    return sc


def _check_both(scenario: Scenario, table: TableSide) -> None:
    """Every input row once in the topic and in the table; no prepared transaction left."""
    kafka_id, pg_id = member_ids(scenario.sink_id)
    shared = member_history(
        load_history(scenario.bootstrap, scenario.sink_id, None, DEFAULT_EPOCH_LOG_TOPIC), members=2
    )
    assert_exact(scenario.check(sink_id=kafka_id, epoch_log=shared))
    report = table.check(pg_id, scenario.inputs, epoch_log=shared)
    assert report.ok and report.epoch_log_checked, report.examples
    assert report.prepared == () and table.prepared(pg_id) == []


@pytest.mark.parametrize("mode", ["unaligned", "aligned"])
def test_executors_workers_and_driver_killed(
    scenario: Scenario, spark_cluster: ClusterTarget, mode: str, postgres_dsn: str, schema: str
) -> None:
    cluster = spark_cluster.require_own()
    epochs = scenario.stage()
    table = TableSide(postgres_dsn, schema).create()
    schedule = list(enumerate(SCHEDULES[mode], start=1))
    plan = scenario.fault_plan([f for epoch, kind in schedule for f in _faults(kind, epoch)])
    cfg = cluster_config(
        scenario,
        spark_cluster,
        fault_plan=plan,
        mode=mode,
        stage_retries=2,
        sink="kafka+postgres",
        parallelism=PARALLELISM[mode],
        **table.options(),
    )
    # 1. one application runs until the driver is killed (the last fault of the schedule)
    first = start_on_cluster(spark_cluster, cfg, scenario.tmp / "apps", "first")
    for epoch, kind in schedule:
        _strike(kind, epoch, plan, cluster, first)
    driver_epoch = schedule[-1][0]
    assert not first.done
    assert max(e.epoch for e in first.epochs) == driver_epoch - 1, first.epochs
    for epoch, kind in schedule:
        assert fired(plan, f"e{epoch}") >= 1, f"{kind} in epoch {epoch} never fired"
    # 2. a new application from the same checkpoint redoes the epoch the driver died in
    second = run_on_cluster(scenario, spark_cluster, cfg, "second")
    assert {e.epoch for e in second.epochs} == set(range(driver_epoch, epochs))
    _check_both(scenario, table)
