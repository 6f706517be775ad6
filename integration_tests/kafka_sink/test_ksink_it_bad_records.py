"""KafkaSink bad records through real Spark and a real broker (docs/bad-records.md).

One micro-batch holds the input topic's records plus two bad ones, routed to different
write partitions: a null value and a record larger than the producers' ``message.max.bytes``.
With ``on_bad_record="dead-letter"`` the good rows must land in the output exactly once (the
checker) and exactly those two records in the dead-letter topic (``read_committed``), once,
across a failed first attempt and a replay by a new sink object; with ``"skip"`` they are
counted and nothing is dead-lettered; beyond ``max_bad_fraction`` nothing of the epoch is
visible.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from connectors.kafka import KafkaSink
from connectors.kafka._sink._bad_records import TRUNCATED_HEADER
from connectors.stage import StageCode, StageError
from connectors.testing import FaultPlan, inject_faults
from connectors.verify import Record, check_exactly_once, produce_input, read_committed_topic
from integration_tests.kafka_sink._support import (
    after_partition_commits,
    lso_reaches_high_watermark,
    read_committed,
    sid,
)
from txn._model import PartitionOutcome

pytestmark = pytest.mark.spark

N = 24
PARALLELISM = 2
# The producers' message.max.bytes: small, so an oversized record stays small too.
MAX_BYTES = 20_000
BIG = MAX_BYTES + 5_000
PRODUCER = {"message.max.bytes": str(MAX_BYTES)}
# Rows keep their input order per key (the checker checks it).
ORDER = ("in_partition", "in_offset")
# The input columns whose values dead letters carry as eos.dlq.source.* headers.
SOURCE = ("in_topic", "in_partition", "in_offset")


def routed_key(spark: Any, prefix: str, partition: int) -> str:
    """A key ``prefix-i`` the stage routes to write ``partition`` (``xxhash64(key)``, as Spark
    repartitions: murmur3 ``hash`` of the routing column, modulo the partitions)."""
    candidates = [f"{prefix}-{i}" for i in range(64)]
    found = spark.sql(
        "SELECT k, pmod(hash(xxhash64(k)), {p}) AS part FROM VALUES {vals} AS t(k)".format(
            p=PARALLELISM, vals=", ".join(f"('{k}')" for k in candidates)
        )
    ).collect()
    return next(r.k for r in found if r.part == partition)


class World:
    """An input topic of N records, the output topic, the batch with its two bad records."""

    def __init__(self, spark: Any, bootstrap: str, new_topic: Any) -> None:
        self.spark, self.bootstrap = spark, bootstrap
        self.input = new_topic("ks-bad-in", partitions=2)
        self.output = new_topic("ks-bad-out", partitions=2)
        produce_input(bootstrap, self.input, N, keys=5)
        self.inputs: list[Record] = read_committed_topic(bootstrap, self.input)
        assert len(self.inputs) == N
        self.null_key = routed_key(spark, "null", 0)
        self.big_key = routed_key(spark, "big", 1)
        self.big_value = json.dumps({"id": -1, "key": self.big_key, "pad": "x" * BIG}).encode()
        self.sink_id = sid()

    def frame(self, bad: bool = True) -> Any:
        rows: list[tuple[str | None, bytes | None, str, int, int]] = [
            (None if r.key is None else r.key.decode(), r.value, self.input, r.partition, r.offset)
            for r in self.inputs
        ]
        if bad:
            rows += [
                (self.null_key, None, self.input, 0, 10**6),
                (self.big_key, self.big_value, self.input, 1, 10**6 + 1),
            ]
        schema = "key string, value binary, in_topic string, in_partition int, in_offset long"
        return self.spark.createDataFrame(rows, schema).repartition(3)

    def sink(self, **options: Any) -> KafkaSink:
        return KafkaSink(
            self.bootstrap,
            self.output,
            self.sink_id,
            parallelism=PARALLELISM,
            producer_config=PRODUCER,
            order_by=ORDER,
            **options,
        )

    def assert_output_exact(self) -> None:
        report = check_exactly_once(
            self.bootstrap, input_topic=self.input, output_topic=self.output, sink_id=self.sink_id
        )
        assert report.epoch_log_checked, report.notes
        assert report.ok, [(a.kind.value, a.record_id, a.detail) for a in report.examples]
        assert report.committed_records == report.input_records == N

    def assert_dead_letters(self, mode: str, source: bool = False) -> None:
        """Exactly the two bad records in ``<output>.dlq``, once each, with their headers.

        ``source``: the sink had ``dead_letter_source=SOURCE`` (headers eos.dlq.source.*).
        """
        dlq = f"{self.output}.dlq"
        records = read_committed(self.bootstrap, dlq)
        assert sorted(r.key or b"" for r in records) == sorted(
            [self.big_key.encode(), self.null_key.encode()]
        ), records
        by_key = {r.key: r for r in records}
        null, big = by_key[self.null_key.encode()], by_key[self.big_key.encode()]
        null_h, big_h = dict(null.headers), dict(big.headers)
        assert null.value is None
        assert null_h["eos.dlq.error.class"] == b"record"
        assert b"null value" in null_h["eos.dlq.error.message"]
        assert big_h["eos.dlq.error.class"] == b"record-too-large"
        assert big_h[TRUNCATED_HEADER] == str(len(self.big_value)).encode()
        assert big.value and self.big_value.startswith(big.value)
        assert len(big.value) < MAX_BYTES
        for headers, partition in ((null_h, b"0"), (big_h, b"1")):
            assert headers["eos.dlq.sink.id"] == self.sink_id.encode()
            assert headers["eos.dlq.batch.id"] == b"0"
            assert headers["eos.dlq.epoch"] == b"0"
            assert headers["eos.dlq.write.partition"] == partition
            assert headers["eos.dlq.topic"] == self.output.encode()
        coordinates = [
            tuple(h.get(f"eos.dlq.source.{c}") for c in ("topic", "partition", "offset"))
            for h in (null_h, big_h)
        ]
        if source:
            topic = self.input.encode()
            assert coordinates == [(topic, b"0", b"1000000"), (topic, b"1", b"1000001")]
        else:
            assert coordinates == [(None, None, None)] * 2
        assert lso_reaches_high_watermark(self.bootstrap, dlq), f"{mode}: a transaction is open"


@pytest.fixture
def world(spark: Any, kafka_bootstrap: str, new_topic: Any) -> World:
    return World(spark, kafka_bootstrap, new_topic)


def fault_plan(tmp_path: Path, *faults: dict[str, Any]) -> FaultPlan:
    path = tmp_path / f"faults-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(list(faults)))
    return FaultPlan(str(path))


# aligned: every partition commits, then the driver fails before logging the epoch complete;
# unaligned: partition 1 (the oversized record's) fails after pre-committing its rows and its
# dead letter, partition 0 (the null value's) commits on its own.
FIRST_FAILURE = {
    "aligned": {"step": "driver_before_complete", "epoch": 0},
    "unaligned": {"step": "before_commit", "epoch": 0, "partition": 1},
}


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_dead_letters_exactly_the_two_bad_records_once_across_a_replay(
    world: World, tmp_path: Path, mode: str
) -> None:
    # unaligned: partition 1 fails only once partition 0 has committed on its own
    order = after_partition_commits(epoch=0) if mode == "unaligned" else []
    faults = fault_plan(tmp_path, *order, {"id": "f", "action": "raise", **FIRST_FAILURE[mode]})
    dlq = {"on_bad_record": "dead-letter", "dead_letter_source": SOURCE}
    first = world.sink(mode=mode, stage_retries=0, **dlq)
    try:
        # a driver step raises InjectedFault itself; a task's arrives wrapped by Spark
        with pytest.raises(Exception, match="injected fault 'f'"), inject_faults(faults):
            first(world.frame(), 0)
    finally:
        first.close()
    # The replay by a new sink object: a committed partition is compared with its marker
    # (its checksum covers the classification), the others written again.
    second = world.sink(mode=mode, **dlq)
    try:
        result = second(world.frame(), 0)
        assert result.committed and not result.skipped
        outcomes = {r.partition: r.outcome for r in result.reports}
        redone = [p for p, o in outcomes.items() if o is PartitionOutcome.COMMITTED]
        if mode == "aligned":
            assert set(outcomes.values()) == {PartitionOutcome.ALREADY_COMMITTED}
        else:
            assert outcomes == {
                0: PartitionOutcome.ALREADY_COMMITTED,
                1: PartitionOutcome.COMMITTED,
            }
        [metrics] = second.metrics()
        assert metrics.dead_lettered == len(redone)  # the oversized record's partition
        assert metrics.skipped_records == 0
    finally:
        second.close()
    # Once more with yet another sink object: the batch is complete, nothing is added.
    third = world.sink(mode=mode, **dlq)
    try:
        assert third(world.frame(), 0).skipped
    finally:
        third.close()
    world.assert_output_exact()
    world.assert_dead_letters(mode, source=True)


def test_skip_counts_the_bad_records_and_dead_letters_nothing(
    world: World, kafka_bootstrap: str
) -> None:
    sink = world.sink(on_bad_record="skip")
    try:
        result = sink(world.frame(), 0)
        assert result.committed
        [metrics] = sink.metrics()
        assert (metrics.skipped_records, metrics.dead_lettered) == (2, 0)
        assert metrics.rows == N  # the good rows
    finally:
        sink.close()
    world.assert_output_exact()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert f"{world.output}.dlq" not in admin.list_topics(timeout=30).topics


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_beyond_max_bad_fraction_the_epoch_aborts_with_nothing_visible(
    world: World, mode: str
) -> None:
    # One bad record in each write partition of about N / 2 rows: more than 1% of either.
    sink = world.sink(
        mode=mode, on_bad_record="dead-letter", max_bad_fraction=0.01, stage_retries=0
    )
    try:
        with pytest.raises(
            StageError,
            match="max_bad_fraction=0.01",
            check=lambda e: e.code is StageCode.BAD_RECORD_THRESHOLD,
        ):
            sink(world.frame(), 0)
        [metrics] = sink.metrics()
        assert not metrics.committed and metrics.dead_lettered == 0
    finally:
        sink.close()
    assert read_committed(world.bootstrap, world.output) == []
    assert read_committed(world.bootstrap, f"{world.output}.dlq") == []
    assert lso_reaches_high_watermark(world.bootstrap, world.output)
    assert lso_reaches_high_watermark(world.bootstrap, f"{world.output}.dlq")
    # Raising the limit lets the same batch through: good rows once, the two dead letters.
    retry = world.sink(mode=mode, on_bad_record="dead-letter", max_bad_fraction=0.5)
    try:
        assert retry(world.frame(), 0).committed
    finally:
        retry.close()
    world.assert_output_exact()
    world.assert_dead_letters(mode)


def test_good_rows_only_batch_dead_letters_nothing(world: World) -> None:
    sink = world.sink(on_bad_record="dead-letter")
    try:
        assert sink(world.frame(bad=False), 0).committed
        [metrics] = sink.metrics()
        assert metrics.dead_lettered == 0
    finally:
        sink.close()
    world.assert_output_exact()
    assert read_committed(world.bootstrap, f"{world.output}.dlq") == []
