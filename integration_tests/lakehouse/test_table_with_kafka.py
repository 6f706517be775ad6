"""One epoch across Kafka and a Delta or Iceberg table (``CompositeSink``), through Spark.

Invariants checked after every step: the table never shows an epoch the topic does not
fully hold; once recovered, both hold exactly the same epochs, every row once; nothing of
the sinks is left open (no vote record staged, the last stable offset at the high watermark).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka import KafkaSink
from connectors.stage import CompositeSink
from connectors.testing import FaultPlan, inject_faults
from integration_tests.kafka_sink._support import lso_reaches_high_watermark, read_committed, values
from integration_tests.lakehouse._tables import FORMATS, Table
from txn import CommitMode
from txn._model import PartitionOutcome

pytestmark = pytest.mark.spark
pytest.importorskip("deltalake", reason="the table sinks' tests need the [delta] extra")
pytest.importorskip("pyiceberg", reason="the table sinks' tests need the [iceberg] extra")

ROWS = 60


def batch(spark: Any, epoch: int) -> Any:
    return spark.range(epoch * ROWS, (epoch + 1) * ROWS, numPartitions=3).selectExpr(
        "id", "concat('v', id) AS v"
    )


def to_kafka(df: Any) -> Any:
    return df.selectExpr("CAST(id AS STRING) AS key", "v AS value")


class World:
    """A topic and a table written together, and the checks of the invariants."""

    def __init__(self, spark: Any, kafka: str, topic: str, table: Table) -> None:
        self.spark, self.kafka, self.topic, self.table = spark, kafka, topic, table
        self.sink_id = f"mix-{uuid.uuid4().hex[:8]}"

    def sink(self, **options: Any) -> CompositeSink:
        # One write task each: aligned mode runs both members' tasks at once on local[2].
        kafka = KafkaSink(self.kafka, self.topic, f"{self.sink_id}-k", parallelism=1)
        lake = self.table.sink(f"{self.sink_id}-t", parallelism=1, create_table=True)
        return CompositeSink(
            [(kafka, to_kafka), (lake, ["id", "v"])],
            sink_id=self.sink_id,
            epoch_log=self.table.tmp / "epochs.log",
            **options,
        )

    def table_epochs(self) -> Counter[int]:
        if not (self.table.tmp / "delta").exists() and self.table.kind == "delta":
            return Counter()
        try:
            rows = self.table.rows("id")
        except Exception:  # noqa: BLE001 - no table yet: no epoch
            return Counter()
        return Counter(int(i) // ROWS for (i,) in rows.elements())

    def topic_epochs(self) -> Counter[int]:
        return Counter(
            int(v.decode()[1:]) // ROWS for v in values(read_committed(self.kafka, self.topic))
        )

    def check_table_never_ahead(self) -> None:
        topic = self.topic_epochs()
        for epoch, n in self.table_epochs().items():
            assert n == ROWS, f"the table shows part of epoch {epoch}"
            assert topic[epoch] >= ROWS, f"the table shows epoch {epoch}, the topic lacks it"

    def check_exactly(self, epochs: int, sink: CompositeSink) -> None:
        assert self.table_epochs() == Counter({e: ROWS for e in range(epochs)})
        assert self.topic_epochs() == Counter({e: ROWS for e in range(epochs)})
        assert lso_reaches_high_watermark(self.kafka, self.topic)
        assert self.table.unnamed_files() == set()


@pytest.fixture(params=FORMATS)
def world(
    request: pytest.FixtureRequest,
    spark: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> World:
    return World(spark, kafka_bootstrap, new_topic("mix", 2), Table(request.param, tmp_path))


@pytest.mark.parametrize("mode", list(CommitMode), ids=lambda m: m.value)
def test_epochs_land_in_both_exactly_once(world: World, mode: CommitMode) -> None:
    sink = world.sink(mode=mode)
    try:
        for epoch in range(3):
            result = sink(batch(world.spark, epoch), epoch)
            assert result.committed
            outcomes = [r.outcome for r in result.reports]
            assert outcomes == [PartitionOutcome.COMMITTED, PartitionOutcome.PREPARED]
            world.check_table_never_ahead()
        assert sink(batch(world.spark, 2), 2).skipped
        assert sink.epoch_log_history().decision(2) is not None  # one decision for both
    finally:
        sink.close()
    world.check_exactly(3, sink)


def test_a_driver_dying_after_the_topic_committed_leaves_the_table_behind(
    world: World, tmp_path: Path
) -> None:
    plan = tmp_path / "faults.json"
    fault = {"id": "d", "step": "driver_before_complete", "epoch": 1, "action": "raise"}
    plan.write_text(json.dumps([{**fault, "times": 1}]))
    sink = world.sink()
    try:
        with inject_faults(FaultPlan(str(plan))):
            assert sink(batch(world.spark, 0), 0).committed
            with pytest.raises(Exception, match="injected fault"):
                sink(batch(world.spark, 1), 1)  # topic committed, table prepared; no decision
        world.check_table_never_ahead()
        assert world.table_epochs()[1] == 0 and world.topic_epochs()[1] == ROWS
    finally:
        sink.close()
    again = world.sink()  # a new driver: recovery, then Spark's replay of batch 1
    try:
        assert again(batch(world.spark, 1), 1).committed
        assert again(batch(world.spark, 2), 2).committed
    finally:
        again.close()
    world.check_exactly(3, again)
