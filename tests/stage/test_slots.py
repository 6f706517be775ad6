"""Unit tests of connectors.stage._slots: the parts that need no SparkContext.

Counts from a live SparkContext are tested in integration_tests/cluster: on the standalone
cluster (test_cluster_votes.py) and on a local session (test_slots_local.py).
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from connectors.stage import SparkConnectError
from connectors.stage._slots import (
    SOURCE_SCHEDULER,
    TaskSlots,
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
    assert TaskSlots(4, 1, 4, SOURCE_SCHEDULER).free == 3
    assert TaskSlots(1, 3, 1, SOURCE_SCHEDULER).free == 0


def test_task_slots_pickle_round_trip() -> None:
    slots = TaskSlots(2, 0, 2, SOURCE_SCHEDULER)
    assert pickle.loads(pickle.dumps(slots)) == slots


class _ConnectLikeSession:
    """A session without a SparkContext: PySpark 4.3's Connect session raises
    PySparkAttributeError (an AttributeError) from ``sparkContext``; older ones raised
    PySparkNotImplementedError (a NotImplementedError)."""

    def __init__(self, error: type[Exception]) -> None:
        self.error = error

    @property
    def sparkContext(self) -> Any:  # noqa: N802 - PySpark's name
        raise self.error(
            "[JVM_ATTRIBUTE_NOT_SUPPORTED] Attribute `sparkContext` is not "
            "supported in Spark Connect as it depends on the JVM."
        )


@pytest.mark.parametrize("error", [AttributeError, NotImplementedError])
def test_connect_session_gets_a_typed_error(error: type[Exception]) -> None:
    with pytest.raises(SparkConnectError, match="Spark Connect"):
        task_slots(_ConnectLikeSession(error))


def test_spark_context_is_accepted_as_is() -> None:
    class Context:
        def statusTracker(self) -> None:  # noqa: N802 - PySpark's name
            return None

    ctx = Context()
    assert spark_context_of(ctx) is ctx
