"""Unit tests of connectors.stage._slots: the parts that need no SparkContext.

Counts from a live SparkContext are tested in integration_tests/cluster: on the standalone
cluster (test_cluster_votes.py) and on a local session (test_slots_local.py).
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from connectors.stage import StageCode, StageError
from connectors.stage._slots import (
    SOURCE_CONF,
    SOURCE_SCHEDULER,
    TaskSlots,
    check_slots,
    conf_task_slots,
    default_parallelism,
    local_master_slots,
    spark_context_of,
    task_slots,
)


@pytest.mark.parametrize(
    ("master", "cpus", "expected"),
    [
        ("local", 1, 1),
        ("local[4]", 1, 4),
        ("local[4]", 2, 2),
        ("local[3, 2]", 1, 3),
        ("local[2,4]", 1, 2),
        ("local[*]", 1, 8),
        ("local[*]", 3, 2),
    ],
)
def test_local_master_slots(master: str, cpus: int, expected: int) -> None:
    assert local_master_slots(master, cpus, cpu_count=8) == expected


@pytest.mark.parametrize(
    "master", ["spark://127.0.0.1:7077", "yarn", "k8s://x", "local-cluster[2,1,1024]", "localhost"]
)
def test_cluster_masters_are_not_parsed(master: str) -> None:
    assert local_master_slots(master) is None


def test_free_slots_never_negative() -> None:
    assert TaskSlots(total=4, running=1, executors=4, source=SOURCE_SCHEDULER).free == 3
    assert TaskSlots(total=1, running=3, executors=1, source=SOURCE_SCHEDULER).free == 0


def test_task_slots_pickle_round_trip() -> None:
    slots = TaskSlots(total=2, running=0, executors=2, source=SOURCE_SCHEDULER)
    assert pickle.loads(pickle.dumps(slots)) == slots


class _Conf:
    def __init__(self, settings: dict[str, str]) -> None:
        self.getAll = dict(settings)


class _ConnectLikeSession:
    """A session without a SparkContext: PySpark 4.3's Connect session raises
    PySparkAttributeError (an AttributeError) from ``sparkContext``; older ones raised
    PySparkNotImplementedError (a NotImplementedError). Its ``conf.getAll`` answers."""

    def __init__(self, error: type[Exception], settings: dict[str, str] | None = None) -> None:
        self.error = error
        self.conf = _Conf(settings or {})

    @property
    def sparkContext(self) -> Any:  # noqa: N802 - PySpark's name
        raise self.error(
            "[JVM_ATTRIBUTE_NOT_SUPPORTED] Attribute `sparkContext` is not "
            "supported in Spark Connect as it depends on the JVM."
        )


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {"spark.master": "local[2]"},
            TaskSlots(total=2, running=0, executors=0, source=SOURCE_CONF),
        ),
        (
            {"spark.master": "local[4]", "spark.task.cpus": "2"},
            TaskSlots(total=2, running=0, executors=0, source=SOURCE_CONF),
        ),
        (
            {"spark.master": "local-cluster[2, 3, 1024]"},
            TaskSlots(total=6, running=0, executors=2, source=SOURCE_CONF),
        ),
        (
            {"spark.master": "yarn", "spark.executor.instances": "3", "spark.executor.cores": "4"},
            TaskSlots(total=12, running=0, executors=3, source=SOURCE_CONF),
        ),
        (
            {"spark.master": "spark://h:7077", "spark.cores.max": "5"},
            TaskSlots(total=5, running=0, executors=0, source=SOURCE_CONF),
        ),
        (
            {
                "spark.master": "k8s://h",
                "spark.executor.instances": "3",
                "spark.executor.cores": "4",
                "spark.dynamicAllocation.enabled": "true",
            },
            None,
        ),
        ({"spark.master": "yarn"}, None),
        ({}, None),
    ],
)
def test_conf_task_slots(settings: dict[str, str], expected: TaskSlots | None) -> None:
    assert conf_task_slots(settings) == expected


@pytest.mark.parametrize("error", [AttributeError, NotImplementedError])
def test_connect_session_counts_from_its_configuration(error: type[Exception]) -> None:
    session = _ConnectLikeSession(error, {"spark.master": "local[3]"})
    assert task_slots(session) == TaskSlots(total=3, running=0, executors=0, source=SOURCE_CONF)
    assert default_parallelism(session) == 3
    check_slots(session, 3)
    with pytest.raises(
        StageError, match="only 3 task slot", check=lambda e: e.code is StageCode.INSUFFICIENT_SLOTS
    ):
        check_slots(session, 4)


def test_connect_default_parallelism_prefers_the_setting() -> None:
    settings = {"spark.master": "yarn", "spark.default.parallelism": "7"}
    assert default_parallelism(_ConnectLikeSession(AttributeError, settings)) == 7


def test_connect_session_without_a_count_gets_a_typed_error() -> None:
    session = _ConnectLikeSession(AttributeError, {"spark.master": "yarn"})
    with pytest.raises(
        StageError, match="parallelism", check=lambda e: e.code is StageCode.SPARK_CONNECT
    ):
        task_slots(session)
    with pytest.raises(
        StageError, match="parallelism", check=lambda e: e.code is StageCode.SPARK_CONNECT
    ):
        default_parallelism(session)
    check_slots(session, 100)  # unknown: left to Spark's own barrier check


def test_no_session_gets_a_typed_error() -> None:
    with pytest.raises(
        StageError, match="SparkContext", check=lambda e: e.code is StageCode.SPARK_CONNECT
    ):
        task_slots(None)  # type: ignore[arg-type]
    with pytest.raises(
        StageError, match="SparkContext", check=lambda e: e.code is StageCode.SPARK_CONNECT
    ):
        check_slots(None, 1)


def test_spark_context_is_accepted_as_is() -> None:
    class Context:
        def statusTracker(self) -> None:  # noqa: N802 - PySpark's name
            return None

    ctx = Context()
    assert spark_context_of(ctx) is ctx
