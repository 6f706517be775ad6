"""``connectors.stage._offsets``: the plan shapes of each Spark line, as py4j answers them.

Doubles of the JVM objects a micro-batch's plan holds (the shapes are read from real runs
in integration_tests/stage/test_input_offsets.py): a method the Java class lacks raises
``Py4JError`` as py4j does, whatever ``hasattr`` says. The reader never raises, never
calls a method a shape lacks, and logs one debug line (no warning, no stack trace) for a
source it does not know.
"""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from py4j.protocol import Py4JError

from connectors.stage import _offsets
from txn import InputOffsets

JAVA_TRACE = "An error occurred while calling o42.relation.\nTrace:\n\tat py4j.Gateway.invoke(Gateway.java:274)"
KAFKA_STREAM = "org.apache.spark.sql.kafka010.KafkaMicroBatchStream"
RATE_STREAM = "org.apache.spark.sql.execution.streaming.sources.RateStreamMicroBatchStream"
PYTHON_STREAM = "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream"


class JavaObject:
    """A py4j object: named methods answer, any other raises Py4JError when called."""

    def __init__(self, class_name: str, **methods: Any) -> None:
        self._class_name = class_name
        self._methods = methods
        self.called: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            self.called.append(name)
            if name not in self._methods:
                raise Py4JError(JAVA_TRACE)
            answer = self._methods[name]
            return answer(*args) if callable(answer) else answer

        return call


def java_class(name: str) -> JavaObject:
    return JavaObject("java.lang.Class", getName=name, getSimpleName=name.rsplit(".", 1)[-1])


def option(offsets: dict[str, dict[str, int]] | None) -> JavaObject:
    if offsets is None:
        return JavaObject("scala.None$", isDefined=False)
    offset = JavaObject("Offset", json=json.dumps(offsets))
    return JavaObject("scala.Some", isDefined=True, get=offset)


def stream(class_name: str, label: str = "") -> JavaObject:
    return JavaObject(class_name, getClass=java_class(class_name), toString=label or class_name)


def v2_leaf(
    spark4: bool,
    source: JavaObject,
    start: dict[str, dict[str, int]] | None,
    end: dict[str, dict[str, int]] | None,
    table: str = "",
) -> JavaObject:
    """Spark 3.5's ``StreamingDataSourceV2Relation`` or 4.x's ``...ScanRelation`` leaf."""
    methods: dict[str, Any] = {
        "isStreaming": True,
        "stream": source,
        "startOffset": option(start),
        "endOffset": option(end),
    }
    if spark4:
        relation = JavaObject("Relation", table=JavaObject("Table", name=table))
        methods["relation"] = relation
    shape = "StreamingDataSourceV2ScanRelation" if spark4 else "StreamingDataSourceV2Relation"
    methods["getClass"] = java_class(f"org.apache.spark.sql.execution.datasources.v2.{shape}")
    return JavaObject(shape, **methods)


def file_leaf() -> JavaObject:
    """A v1 file source: 3.5's ``LogicalRelation`` has ``relation()`` but no ``stream()``."""
    cls = java_class("org.apache.spark.sql.execution.datasources.LogicalRelation")
    return JavaObject("LogicalRelation", isStreaming=True, getClass=cls, relation="json")


def batch_leaf() -> JavaObject:
    cls = java_class("org.apache.spark.sql.catalyst.plans.logical.LocalRelation")
    return JavaObject("LocalRelation", isStreaming=False, getClass=cls)


class Leaves:
    def __init__(self, leaves: list[JavaObject]) -> None:
        self._leaves = list(leaves)

    def hasNext(self) -> bool:  # noqa: N802 - a Java iterator
        return bool(self._leaves)

    def next(self) -> JavaObject:
        return self._leaves.pop(0)


def plan(*leaves: JavaObject) -> JavaObject:
    seq = JavaObject("Seq", iterator=lambda: Leaves(list(leaves)))
    return JavaObject("LogicalPlan", collectLeaves=seq)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="connectors.stage.offsets")
    return caplog


def quiet(logs: pytest.LogCaptureFixture) -> None:
    """No warning, and no record carrying a Java stack trace."""
    assert [r for r in logs.records if r.levelno >= logging.WARNING] == []
    assert all("\n" not in r.getMessage() and "\tat " not in r.getMessage() for r in logs.records)


def test_spark_35s_rate_source_is_another_source_without_calling_relation(
    logs: pytest.LogCaptureFixture,
) -> None:
    leaf = v2_leaf(False, stream(RATE_STREAM), {"x": {"0": 0}}, {"x": {"0": 4}})
    assert _offsets._from_plan(plan(leaf)) == InputOffsets(other_sources=1)
    assert "relation" not in leaf.called  # the 3.5 shape has none; py4j would raise
    quiet(logs)
    assert any(RATE_STREAM in r.getMessage() for r in logs.records)


@pytest.mark.parametrize("spark4", [False, True], ids=["3.5", "4.x"])
def test_sparks_kafka_source_is_recorded_on_every_shape(
    spark4: bool, logs: pytest.LogCaptureFixture
) -> None:
    leaf = v2_leaf(spark4, stream(KAFKA_STREAM), {"in": {"0": 3, "1": 5}}, {"in": {"0": 7, "1": 5}})
    got = _offsets._from_plan(plan(leaf))
    assert got == InputOffsets.of({("in", 0): 3, ("in", 1): 5}, {("in", 0): 7, ("in", 1): 5})
    quiet(logs)


def test_kafka_rc_is_recorded_by_its_table(logs: pytest.LogCaptureFixture) -> None:
    leaf = v2_leaf(True, stream(PYTHON_STREAM), {"t": {"0": 0}}, {"t": {"0": 9}}, table="kafka-rc")
    assert _offsets._from_plan(plan(leaf)) == InputOffsets.of({("t", 0): 0}, {("t", 0): 9})
    quiet(logs)


def test_a_first_batch_without_start_starts_nowhere(logs: pytest.LogCaptureFixture) -> None:
    leaf = v2_leaf(True, stream(KAFKA_STREAM), None, {"t": {"0": 9}}, table="KafkaTable")
    assert _offsets._from_plan(plan(leaf)) == InputOffsets.of({}, {("t", 0): 9})


def test_file_and_batch_leaves(logs: pytest.LogCaptureFixture) -> None:
    kafka = v2_leaf(False, stream(KAFKA_STREAM), {"t": {"0": 1}}, {"t": {"0": 2}})
    got = _offsets._from_plan(plan(file_leaf(), batch_leaf(), kafka))
    assert got == InputOffsets.of({("t", 0): 1}, {("t", 0): 2}, other_sources=1)
    quiet(logs)


def test_the_same_source_read_twice_counts_once(logs: pytest.LogCaptureFixture) -> None:
    source = stream(KAFKA_STREAM, "KafkaV2[Subscribe[t]]")
    leaves = [v2_leaf(True, source, {"t": {"0": 1}}, {"t": {"0": 2}}) for _ in range(2)]
    assert _offsets._from_plan(plan(*leaves)) == InputOffsets.of({("t", 0): 1}, {("t", 0): 2})


def test_two_kafka_sources_of_one_partition_are_not_one_position(
    logs: pytest.LogCaptureFixture,
) -> None:
    first = v2_leaf(True, stream(KAFKA_STREAM, "a"), {"t": {"0": 1}}, {"t": {"0": 2}})
    second = v2_leaf(True, stream(KAFKA_STREAM, "b"), {"t": {"0": 5}}, {"t": {"0": 6}})
    got = _offsets._from_plan(plan(first, second))
    assert got == InputOffsets.of({("t", 0): 1}, {("t", 0): 2}, other_sources=1)


def test_a_leaf_answering_nothing_is_another_source(logs: pytest.LogCaptureFixture) -> None:
    broken = JavaObject("Strange", isStreaming=True)  # getClass() raises too
    kafka = v2_leaf(True, stream(KAFKA_STREAM), {"t": {"0": 1}}, {"t": {"0": 2}})
    got = _offsets._from_plan(plan(broken, kafka))
    assert got == InputOffsets.of({("t", 0): 1}, {("t", 0): 2}, other_sources=1)
    quiet(logs)
    assert any("Py4JError" in r.getMessage() for r in logs.records)


def test_a_plan_without_leaves_to_list_records_nothing(logs: pytest.LogCaptureFixture) -> None:
    assert _offsets._from_plan(JavaObject("LogicalPlan")) is None
    quiet(logs)


def test_a_kafka_source_with_offsets_of_another_shape_warns_in_one_line(
    logs: pytest.LogCaptureFixture,
) -> None:
    leaf = v2_leaf(True, stream(KAFKA_STREAM), {"t": {"0": 1}}, {"t": {"x": 2}})
    assert _offsets._from_plan(plan(leaf)) == InputOffsets(other_sources=1)
    warnings = [r.getMessage() for r in logs.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and KAFKA_STREAM in warnings[0] and "\n" not in warnings[0]


class Session:
    """A batch DataFrame's session whose stream execution cannot be read (another Spark)."""

    def __init__(self) -> None:
        self._sc = SimpleNamespace(_jvm=JavaObject("JVM"))
        self._jsparkSession = JavaObject("SparkSession")  # sharedState() raises


class Frame:
    sparkSession = Session()  # noqa: N815 - the DataFrame attribute


def test_an_unreadable_execution_records_nothing_in_one_debug_line(
    logs: pytest.LogCaptureFixture,
) -> None:
    assert _offsets.batch_input(Frame(), "9f0c6a43-0000-0000-0000-000000000000", 3) is None  # type: ignore[arg-type]
    quiet(logs)
    assert len(logs.records) == 1 and "batch 3" in logs.records[0].getMessage()


def test_no_query_no_offsets(logs: pytest.LogCaptureFixture) -> None:
    assert _offsets.batch_input(Frame(), None, 0) is None  # type: ignore[arg-type]
    assert logs.records == []
