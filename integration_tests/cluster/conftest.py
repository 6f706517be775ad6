"""Fixtures of the cluster tests: one standalone Spark cluster for the whole session.

``SPARK_MASTER_URL`` selects an existing cluster instead (like ``KAFKA_BOOTSTRAP_SERVERS``
for Kafka); tests that kill executors or workers need processes of their own and skip
then. Otherwise a master and two one-core workers start on 127.0.0.1 from pyspark's own
``bin/spark-class`` (``integration_tests.support.spark_cluster``) and are stopped at the end.
Every test module here is marked ``cluster`` (``pytest -m "not cluster"`` leaves them out).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from integration_tests.support.spark_cluster import StandaloneCluster, cluster_master_url

WORKERS = 2


@dataclass(frozen=True)
class ClusterTarget:
    """The cluster a test runs its applications on."""

    master_url: str
    env: dict[str, str] = field(default_factory=dict)
    own: StandaloneCluster | None = None  # None: an external cluster (SPARK_MASTER_URL)

    def require_own(self) -> StandaloneCluster:
        """The cluster this session started; skips the test on an external cluster."""
        if self.own is None:
            pytest.skip(
                "kills executors or workers, which needs the cluster this test "
                "session starts; SPARK_MASTER_URL names an external one"
            )
        return self.own


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterTarget]:
    """The session's standalone cluster (started here unless SPARK_MASTER_URL is set)."""
    external = cluster_master_url()
    if external:
        python = os.environ.get("PYSPARK_PYTHON", sys.executable)
        yield ClusterTarget(external, {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python})
        return
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), WORKERS) as cluster:
        yield ClusterTarget(cluster.master_url, cluster.app_env(), cluster)
