"""Aligned mode's slot count and vote channel on a standalone cluster.

* Slots: an application limited to one core (``spark.cores.max=1``) has one task slot,
  while ``defaultParallelism`` still says 2 (standalone's floor); ``task_slots`` reports 1.
  The aligned sink refuses a parallelism of 2 there with ``StageCode.INSUFFICIENT_SLOTS``
  before anything is logged (it counts the slots with ``connectors.stage._slots.task_slots``,
  not ``defaultParallelism``, which would let Spark fail the barrier stage much later).
* Vote channel: the votes travel from the executors to ``spark.driver.host``, the driver's
  address as Spark advertises it. Behind a firewall that passes only Spark's configured
  driver ports (``_forward.PortForward``), Spark itself works but the vote server's port
  is unreachable: every write task fails with the sink's StageCode.VOTE_CHANNEL message, aborts
  its transaction, and the epoch stays in doubt (nothing visible, no open transaction);
  the same epoch then completes through ``vote_channel="barrier"`` (Spark's own RPC).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.verify import AnomalyKind, check_exactly_once, produce_input
from integration_tests.cluster._driver import DriverProcess
from integration_tests.cluster._forward import PortForward
from integration_tests.cluster.conftest import ClusterTarget
from integration_tests.support.spark_cluster import LOOPBACK, free_port

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.timeout(600)]

RECORDS = 200
# The advertised driver address behind the "firewall" (any 127/8 address is loopback).
ADVERTISED = "127.0.0.2"


def _job(
    bootstrap: str, inp: str, out: str, sink_id: str, epoch_log: Path, **sink_args: Any
) -> str:
    import json

    return "sink " + json.dumps(
        {
            "bootstrap": bootstrap,
            "input_topic": inp,
            "output_topic": out,
            "sink_id": sink_id,
            "epoch": 0,
            "sink_args": {
                "mode": "aligned",
                "parallelism": 2,
                "epoch_log": str(epoch_log),
                **sink_args,
            },
        }
    )


def test_slots_come_from_the_executors_not_default_parallelism(
    spark_cluster: ClusterTarget, tmp_path: Path
) -> None:
    conf = {"spark.master": spark_cluster.master_url, "spark.cores.max": "1"}
    with DriverProcess(conf, spark_cluster.env, tmp_path / "driver.log") as driver:
        slots = driver.ask("wait 1")
        assert slots["total"] == 1 and slots["executors"] == 1, slots
        assert slots["source"] == "scheduler"
        assert slots["default_parallelism"] == 2  # the guess the sink must not rely on


def test_aligned_sink_refuses_more_partitions_than_slots(
    spark_cluster: ClusterTarget,
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
) -> None:
    inp, out = new_topic("cl-in", partitions=2), new_topic("cl-out", partitions=3)
    produce_input(kafka_bootstrap, inp, RECORDS)
    conf = {
        "spark.master": spark_cluster.master_url,
        "spark.cores.max": "1",
        # fail the barrier stage at the first slot check instead of retrying for minutes
        "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "1",
    }
    with DriverProcess(conf, spark_cluster.env, tmp_path / "driver.log") as driver:
        driver.ask("wait 1")
        answer = driver.ask(
            _job(kafka_bootstrap, inp, out, "cl-slots", tmp_path / "epochs", stage_retries=0)
        )
    assert "[insufficient-slots]" in answer["error"], answer["error"][:1500]


def test_unreachable_vote_port_fails_the_epoch_cleanly(
    spark_cluster: ClusterTarget,
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
) -> None:
    spark_cluster.require_own()  # the executors must reach 127.0.0.2 on this machine
    inp, out = new_topic("cl-in", partitions=2), new_topic("cl-out", partitions=3)
    produce_input(kafka_bootstrap, inp, RECORDS)
    ports = [free_port(), free_port()]
    conf = {
        "spark.master": spark_cluster.master_url,
        "spark.driver.host": ADVERTISED,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.driver.port": str(ports[0]),
        "spark.driver.blockManager.port": str(ports[1]),
    }
    epoch_log = tmp_path / "epochs"
    sink_id = f"cl-fw-{tmp_path.name[-12:]}".replace("_", "-")
    with (
        PortForward(ADVERTISED, LOOPBACK, ports),
        DriverProcess(conf, spark_cluster.env, tmp_path / "driver.log") as driver,
    ):
        assert driver.ask("wait 2")["total"] == 2  # Spark's own traffic passes the firewall
        failed = driver.ask(_job(kafka_bootstrap, inp, out, sink_id, epoch_log, stage_retries=0))
        assert not failed["ok"]
        assert "cannot reach the driver's vote server at 127.0.0.2:" in failed["error"], failed
        stuck = check_exactly_once(
            kafka_bootstrap,
            input_topic=inp,
            output_topic=out,
            sink_id=sink_id,
            epoch_log=str(epoch_log),
        )
        assert stuck.committed_records == 0  # nothing of the failed epoch is visible
        # No assertion on open transactions here: a task that fails aborts its own, but
        # Spark cancels the sibling barrier task, which may die before it aborts; that
        # one is aborted by the next run's init_transactions (checked below).
        assert stuck.count(AnomalyKind.IN_DOUBT_EPOCH) == 1
        # the same epoch, gathered through Spark's barrier RPC instead
        done = driver.ask(
            _job(kafka_bootstrap, inp, out, sink_id, epoch_log, vote_channel="barrier")
        )
        assert done == {"ok": True, "committed": True, "skipped": False}, done
    report = check_exactly_once(
        kafka_bootstrap,
        input_topic=inp,
        output_topic=out,
        sink_id=sink_id,
        epoch_log=str(epoch_log),
    )
    assert report.ok and report.committed_records == RECORDS, report.examples
