"""Unit tests of the cluster and Connect server managers that start no process."""

from __future__ import annotations

from pathlib import Path

import pytest

from integration_tests.support.spark_cluster import (
    ClusterStartError,
    StandaloneCluster,
    cluster_master_url,
    spark_home,
)
from integration_tests.support.spark_connect import (
    PYTHON_CONNECT_BACK_TIMEOUT_S,
    SERVER_CLASS,
    ConnectServer,
    connect_server_url,
)


def test_spark_home_is_the_pyspark_package() -> None:
    assert (spark_home() / "bin" / "spark-class").is_file()
    assert list((spark_home() / "jars").glob("spark-connect_*.jar")), "pyspark ships Connect"


def test_env_selects_an_external_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_MASTER_URL", raising=False)
    monkeypatch.delenv("SPARK_CONNECT_URL", raising=False)
    assert cluster_master_url() is None and connect_server_url() is None
    monkeypatch.setenv("SPARK_MASTER_URL", "spark://h:7077")
    monkeypatch.setenv("SPARK_CONNECT_URL", "sc://h:15002")
    assert cluster_master_url() == "spark://h:7077"
    assert connect_server_url() == "sc://h:15002"


def test_cluster_shape_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="workers >= 1"):
        StandaloneCluster(tmp_path, workers=0)


def test_addresses_need_a_started_cluster(tmp_path: Path) -> None:
    cluster = StandaloneCluster(tmp_path)
    with pytest.raises(ClusterStartError, match="start"):
        cluster.master_url  # noqa: B018 - the property is what is tested
    cluster.stop()  # nothing started: a no-op


def test_connect_command_runs_the_server_on_loopback(tmp_path: Path) -> None:
    server = ConnectServer(
        tmp_path, master="spark://127.0.0.1:7077", conf={"spark.executor.memory": "512m"}
    )
    cmd = server.command()
    assert cmd[0].endswith("bin/spark-submit")
    assert cmd[cmd.index("--class") + 1] == SERVER_CLASS
    assert cmd[cmd.index("--master") + 1] == "spark://127.0.0.1:7077"
    assert "spark.connect.grpc.binding.address=127.0.0.1" in cmd
    assert "spark.executor.memory=512m" in cmd
    # foreachBatch's Python process gets far more than Spark's 15 s to connect back
    timeout = f"spark.python.authenticate.socketTimeout={PYTHON_CONNECT_BACK_TIMEOUT_S}s"
    assert timeout in cmd and PYTHON_CONNECT_BACK_TIMEOUT_S >= 60
    with pytest.raises(ClusterStartError):
        server.url  # noqa: B018 - not started
