"""Unit tests of the driver side of Spark's options: timestamps, triggers, offset fetch bounds.

The AdminClient is the scripted double of ``_admin.py``; what each option means is Spark's
Structured Streaming + Kafka integration guide, summarized in docs/kafka-source.md
("Options"). The same options against a real broker and Spark are in
integration_tests/kafka_source/test_options_parity.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from connectors.kafka import KafkaCode, KafkaConnectorError
from connectors.kafka._source import KafkaStreamReader, SourceOptions
from connectors.kafka._source._cluster import ClusterView
from connectors.kafka._source._source import resolve_bound
from connectors.kafka._source._trigger import MinOffsetsGate
from tests.kafka_source._admin import ScriptedAdmin, metadata

BOOTSTRAP = "broker-under-test:9092"
LOADED = metadata({"t": 2})
DOWN = KafkaError(KafkaError._TRANSPORT)
PARTS = [("t", 0), ("t", 1)]
# Records (timestamp ms, offset): partition 0 has them at 100, 200, 300; partition 1 at 150.
RECORDS = {("t", 0): [(100, 0), (200, 1), (300, 2)], ("t", 1): [(150, 0)]}
LATEST = {("t", 0): 3, ("t", 1): 1}


def options(**extra: str) -> SourceOptions:
    return SourceOptions.from_options(
        {"kafka.bootstrap.servers": BOOTSTRAP, "subscribe": "t", **extra}
    )


def view(admin: ScriptedAdmin, opts: SourceOptions, wait_s: float = 5.0) -> ClusterView:
    cluster = ClusterView(opts, unavailable_wait_s=wait_s, gone_confirm_s=0.3)
    cluster._admin = admin
    return cluster


# ---- fetchOffset.numRetries / fetchOffset.retryIntervalMs ------------------------------


def test_fetch_offset_bounds_give_up_after_the_attempts_spark_counts() -> None:
    admin = ScriptedAdmin([DOWN], {})
    opts = options(**{"fetchOffset.numRetries": "2", "fetchOffset.retryIntervalMs": "0"})
    with pytest.raises(
        KafkaConnectorError, match=BOOTSTRAP, check=lambda e: e.code is KafkaCode.UNAVAILABLE
    ):
        view(admin, opts, wait_s=60.0).settled_latest({("t", 0): 5})
    assert admin.metadata_calls == 2


def test_without_fetch_offset_options_the_outage_bound_applies() -> None:
    admin = ScriptedAdmin([DOWN, DOWN, DOWN, LOADED], dict(LATEST))
    assert view(admin, options()).settled_latest({}) == LATEST  # three errors waited out
    assert admin.metadata_calls == 4


def test_answers_that_only_lack_something_are_confirmed_not_counted() -> None:
    # A loading broker's empty answers are doubts, not errors: numRetries=1 does not end
    # the lookup; the partitions come back within the confirmation interval.
    admin = ScriptedAdmin([metadata({}), metadata({}), LOADED], dict(LATEST))
    opts = options(**{"fetchOffset.numRetries": "1"})
    assert view(admin, opts).settled_latest({("t", 0): 1}) == LATEST
    assert admin.metadata_calls == 3


# ---- timestamps ------------------------------------------------------------------------


def resolve(**extra: str) -> dict[tuple[str, int], int]:
    opts = options(**extra)
    start, end = opts.batch_bounds()
    bound = end if "endingTimestamp" in extra else start
    cluster = view(ScriptedAdmin([LOADED], dict(LATEST), RECORDS), opts)
    return resolve_bound(cluster, bound, PARTS, bound.option)


def test_a_timestamp_starts_each_partition_at_its_first_record_at_or_after_it() -> None:
    assert resolve(startingTimestamp="150") == {("t", 0): 1, ("t", 1): 0}
    assert resolve(startingTimestamp="0") == {("t", 0): 0, ("t", 1): 0}
    per_partition = '{"t": {"0": 300, "1": 100}}'
    assert resolve(startingOffsetsByTimestamp=per_partition) == {("t", 0): 2, ("t", 1): 0}


def test_no_match_fails_by_default_naming_the_partition_and_the_fix() -> None:
    with pytest.raises(
        KafkaConnectorError, check=lambda e: e.code is KafkaCode.OFFSET_SPEC
    ) as info:
        resolve(startingTimestamp="250")
    text = str(info.value)
    assert "startingTimestamp: no record at or after the timestamp in t-1 (timestamp 250)" in text
    assert "startingOffsetsByTimestampStrategy=latest" in text


def test_no_match_with_strategy_latest_starts_at_the_latest_offset() -> None:
    got = resolve(startingTimestamp="250", startingOffsetsByTimestampStrategy="latest")
    assert got == {("t", 0): 2, ("t", 1): 1}


def test_an_ending_timestamp_without_match_ends_at_the_latest_offset() -> None:
    assert resolve(endingTimestamp="250") == {("t", 0): 2, ("t", 1): 1}


def test_a_match_at_or_past_the_latest_readable_offset_is_none() -> None:
    # An open transaction holds the last stable offset of partition 0 at 1: the record at
    # offset 2 is not readable under read_committed, as a broker answers then.
    opts = options(startingTimestamp="300")
    admin = ScriptedAdmin([LOADED], {("t", 0): 1, ("t", 1): 1}, RECORDS)
    with pytest.raises(
        KafkaConnectorError, match="t-0", check=lambda e: e.code is KafkaCode.OFFSET_SPEC
    ):
        resolve_bound(view(admin, opts), opts.stream_starting(), PARTS, "startingTimestamp")


def test_timestamps_per_partition_must_name_every_partition() -> None:
    with pytest.raises(
        KafkaConnectorError,
        match=r"missing \[\('t', 1\)\]",
        check=lambda e: e.code is KafkaCode.OFFSET_SPEC,
    ):
        resolve(startingOffsetsByTimestamp='{"t": {"0": 100}}')


# ---- minOffsetsPerTrigger / maxTriggerDelay --------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_gate_waits_for_the_minimum_until_the_delay_passed() -> None:
    clock = Clock()
    gate = MinOffsetsGate(10, max_delay_ms=60_000, clock=clock)
    start = {("t", 0): 0}
    assert not gate.holds(start, {("t", 0): 1})  # a query run's first trigger goes through
    clock.now += 1
    assert gate.holds(start, {("t", 0): 9})  # 9 new offsets < 10
    assert not gate.holds(start, {("t", 0): 10})  # enough: a batch, and the delay restarts
    clock.now += 59
    assert gate.holds(start, {("t", 0): 1})
    clock.now += 1
    assert not gate.holds(start, {("t", 0): 1})  # maxTriggerDelay passed: some data runs
    assert gate.holds({}, {("t", 0): 5, ("t", 1): 4})  # new partitions count from 0


def stream_reader(admin: ScriptedAdmin, **extra: str) -> tuple[KafkaStreamReader, Clock]:
    reader = KafkaStreamReader(options(**extra))
    reader._cluster._admin = admin
    clock = Clock()
    opts = reader._options
    assert opts.min_offsets_per_trigger is not None
    reader._gate = MinOffsetsGate(opts.min_offsets_per_trigger, opts.max_trigger_delay_ms, clock)
    return reader, clock


def json_of(offsets: dict[tuple[str, int], int]) -> dict[str, Any]:
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = o
    return out


def test_the_stream_reader_holds_a_small_batch_back() -> None:
    admin = ScriptedAdmin([LOADED], {("t", 0): 4, ("t", 1): 0})
    reader, clock = stream_reader(admin, minOffsetsPerTrigger="10")
    assert reader.getDefaultReadLimit() == ReadMinRows(10)
    start = json_of({("t", 0): 0, ("t", 1): 0})
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset(start, limit) == json_of({("t", 0): 4, ("t", 1): 0})  # first
    clock.now += 1
    admin.offsets = {("t", 0): 9, ("t", 1): 4}  # 9 new since 4: fewer than 10
    begin = json_of({("t", 0): 4, ("t", 1): 0})
    assert reader.latestOffset(begin, limit) == begin  # no batch this trigger
    assert reader.reportLatestOffset() == json_of(admin.offsets)  # still reported
    admin.offsets = {("t", 0): 10, ("t", 1): 4}
    assert reader.latestOffset(begin, limit) == json_of(admin.offsets)


def test_with_both_limits_the_maximum_caps_what_the_minimum_lets_through() -> None:
    admin = ScriptedAdmin([LOADED], {("t", 0): 100, ("t", 1): 100})
    reader, clock = stream_reader(admin, minOffsetsPerTrigger="10", maxOffsetsPerTrigger="20")
    assert reader.getDefaultReadLimit() == ReadMaxRows(20)
    start = json_of({("t", 0): 0, ("t", 1): 0})
    clock.now += 1
    reader._gate.holds({}, {})  # type: ignore[union-attr] - past the first trigger
    clock.now += 1
    assert reader.latestOffset(start, ReadMaxRows(20)) == json_of({("t", 0): 10, ("t", 1): 10})
    admin.offsets = {("t", 0): 14, ("t", 1): 10}
    begin = json_of({("t", 0): 10, ("t", 1): 10})
    assert reader.latestOffset(begin, ReadMaxRows(20)) == begin  # 4 new < 10


def test_available_now_and_read_all_available_never_wait() -> None:
    admin = ScriptedAdmin([LOADED], {("t", 0): 3, ("t", 1): 0})
    reader, clock = stream_reader(admin, minOffsetsPerTrigger="10")
    reader._gate.holds({}, {})  # type: ignore[union-attr] - past the first trigger
    clock.now += 1
    start = json_of({("t", 0): 0, ("t", 1): 0})
    assert reader.latestOffset(start, ReadAllAvailable()) == json_of(admin.offsets)  # Once
    reader.prepareForTriggerAvailableNow()
    assert reader.latestOffset(start, ReadMinRows(10)) == json_of(admin.offsets)
