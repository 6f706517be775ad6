"""``task_slots`` on the session's local Spark (``local[2]``): the scheduler's own count."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.stage import StageCode, StageError
from connectors.stage import _slots as slots_module
from connectors.stage._slots import SOURCE_SCHEDULER, task_slots, wait_for_task_slots

pytestmark = [pytest.mark.spark]


def test_local_session_has_its_thread_count_as_slots(spark: Any) -> None:
    slots = task_slots(spark)
    assert (slots.total, slots.executors, slots.source) == (2, 0, SOURCE_SCHEDULER)
    assert slots.running == 0 and slots.free == 2
    assert task_slots(spark.sparkContext) == slots
    assert wait_for_task_slots(spark, 5, timeout_s=0.2).total == 2  # returns the last count


def test_local_mode_refuses_at_once_without_waiting_for_executors(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Local mode has no executors (0 registered) and never gains slots: waiting for the
    # first executors (as on a starting cluster) would only delay the error.
    def no_wait(*_: Any, **__: Any) -> None:
        raise AssertionError("check_slots waited for executors in local mode")

    monkeypatch.setattr(slots_module, "wait_for_task_slots", no_wait)
    with pytest.raises(
        StageError, match="only 2 task slot", check=lambda e: e.code is StageCode.INSUFFICIENT_SLOTS
    ):
        slots_module.check_slots(spark, 3)
    slots_module.check_slots(spark, 2)


class _DriverLog:
    """Captures the driver JVM's log lines of one logger (a log4j2 appender, via py4j)."""

    def __init__(self, spark: Any, logger: str) -> None:
        jvm = spark.sparkContext._jvm
        self._core = jvm.org.apache.logging.log4j.core
        self._context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
        self._writer = jvm.java.io.StringWriter()
        layout = self._core.layout.PatternLayout.createDefaultLayout()
        self._appender = self._core.appender.WriterAppender.createAppender(
            layout, None, self._writer, f"eos-test-{id(self)}", False, True
        )
        self._appender.start()
        self._logger = self._context.getLogger(logger)
        self._logger.addAppender(self._appender)

    def text(self) -> str:
        return str(self._writer.toString())

    def close(self) -> None:
        self._logger.removeAppender(self._appender)
        self._appender.stop()


def test_slot_count_in_local_mode_logs_no_executor_request_warning(spark: Any) -> None:
    # Spark's local scheduler cannot list executors: SparkContext.getExecutorIds() logs
    # "Requesting executors is not supported by current scheduler" for every call, which the
    # aligned sink made twice per epoch.
    captured = _DriverLog(spark, "org.apache.spark.SparkContext")
    try:
        spark.sparkContext._jsc.sc().getExecutorIds()  # the capture sees the warning itself
        assert "Requesting executors is not supported" in captured.text()
        before = captured.text()
        task_slots(spark)
        slots_module.check_slots(spark, 2)
        assert captured.text() == before
    finally:
        captured.close()


def test_aligned_epochs_in_local_mode_log_no_executor_request_warning(
    spark: Any, kafka_bootstrap: str, new_topic: Any
) -> None:
    import uuid

    from connectors.kafka import KafkaSink

    topic = new_topic("slots-warn", 2)
    sink = KafkaSink(
        kafka_bootstrap, topic, f"slots-{uuid.uuid4().hex[:8]}", parallelism=2, mode="aligned"
    )
    captured = _DriverLog(spark, "org.apache.spark")  # every Spark logger of the driver
    try:
        for epoch in range(2):
            df = spark.range(epoch * 10, (epoch + 1) * 10).selectExpr(
                "CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value"
            )
            assert sink(df, epoch).committed
        assert "Requesting executors" not in captured.text()
    finally:
        captured.close()
        sink.close()
