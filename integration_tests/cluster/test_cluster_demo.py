"""``python -m connectors.demo --master spark://...``: the demo as an application on the cluster.

The demo runs its Kafka-source, Kafka-sink query in aligned mode on the session's cluster
(two one-core workers: the two write tasks of each epoch run in two executor JVMs), with
the session's Kafka as ``--bootstrap-servers``, and verifies its own output; its exit code
says whether the output is exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from integration_tests.cluster.conftest import ClusterTarget

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.timeout(900)]

# Seconds the demo may take on a loaded two-core machine (about a minute when quiet).
DEMO_TIMEOUT_S = 780.0


def test_demo_runs_exactly_once_on_the_cluster(
    spark_cluster: ClusterTarget, kafka_bootstrap: str, tmp_path: Path
) -> None:
    env = {**os.environ, **spark_cluster.env}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "connectors.demo",
            "--master",
            spark_cluster.master_url,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--records",
            "1200",
            "--epochs",
            "3",
            "--work-dir",
            str(tmp_path / "demo"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert f"Spark master: {spark_cluster.master_url}" in out
    assert "1,200" in out
