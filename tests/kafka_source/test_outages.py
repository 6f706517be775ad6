"""Unit tests of the source's outage rules (ClusterView, ReadPosition, the stream reader).

The AdminClient is a scripted double answering Metadata and ListOffsets the way a broker
that is down, restarting or loading its topics does; the rules under test are in
docs/kafka-source.md ("Broker outages and restarts"). Real restarts are in
integration_tests/kafka_source/test_broker_restarts.py.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from pyspark.sql.streaming.datasource import ReadAllAvailable

from connectors.kafka import KafkaCode, KafkaConnectorError
from connectors.kafka._source import KafkaStreamReader, SourceOptions
from connectors.kafka._source._cluster import GONE_CONFIRM_S, UNAVAILABLE_WAIT_S, ClusterView
from connectors.kafka._source._position import ReadPosition, merge_max
from tests.kafka_source._admin import ScriptedAdmin, metadata

BOOTSTRAP = "broker-under-test:9092"
# Short bounds so the tests run in a second; the defaults are checked separately.
WAIT_S = 0.6
CONFIRM_S = 0.3

Answer = Callable[[], Any]


def options(**extra: str) -> SourceOptions:
    opts = {"kafka.bootstrap.servers": BOOTSTRAP, "subscribe": "t", **extra}
    return SourceOptions.from_options(opts)


def view(
    admin: ScriptedAdmin,
    opts: SourceOptions | None = None,
    *,
    wait_s: float = WAIT_S,
    confirm_s: float = CONFIRM_S,
) -> ClusterView:
    cluster = ClusterView(opts or options(), unavailable_wait_s=wait_s, gone_confirm_s=confirm_s)
    cluster._admin = admin
    return cluster


LOADED = metadata({"t": 2})
NO_TOPICS = metadata({})
LOADING_ERRORS = metadata({}, {"t": KafkaError.LEADER_NOT_AVAILABLE})
DOWN = KafkaError(KafkaError._TRANSPORT)


def test_bounds_are_named_ordered_and_documented() -> None:
    # Gone needs consistent error-free answers for GONE_CONFIRM_S, which must fit inside
    # the bound of the whole lookup, or a slow restart would end in "unavailable".
    assert 0 < GONE_CONFIRM_S < UNAVAILABLE_WAIT_S
    doc = (Path(__file__).resolve().parents[2] / "docs" / "kafka-source.md").read_text()
    doc = " ".join(doc.split())
    assert f"`UNAVAILABLE_WAIT_S` = **{UNAVAILABLE_WAIT_S:.0f} s**" in doc
    assert f"`GONE_CONFIRM_S` = **{GONE_CONFIRM_S:.0f} s**" in doc


@pytest.mark.parametrize(
    "outage", [LOADING_ERRORS, NO_TOPICS, DOWN], ids=["errors", "empty", "down"]
)
def test_a_short_outage_is_waited_out(outage: Any) -> None:
    admin = ScriptedAdmin([outage, outage, LOADED], {("t", 0): 5, ("t", 1): 7})
    expected = {("t", 0): 5, ("t", 1): 7}
    # Long bounds: two empty answers must not confirm a loss however slow the machine is.
    assert view(admin, wait_s=60.0, confirm_s=30.0).settled_latest(expected) == expected
    assert admin.metadata_calls == 3


@pytest.mark.parametrize("outage", [LOADING_ERRORS, DOWN], ids=["errors", "down"])
def test_a_long_outage_fails_with_the_bootstrap_address(outage: Any) -> None:
    admin = ScriptedAdmin([outage], {})
    started = time.monotonic()
    with pytest.raises(
        KafkaConnectorError, match=BOOTSTRAP, check=lambda e: e.code is KafkaCode.UNAVAILABLE
    ) as info:
        view(admin).settled_latest({("t", 0): 5})
    assert WAIT_S <= time.monotonic() - started < WAIT_S + 5
    assert "unavailable" in str(info.value)


def test_errors_keep_restarting_the_confirmation() -> None:
    # Missing-without-error, then errors, then missing again: the errors reset the
    # interval, so "gone" is never concluded while the answers are unhealthy.
    flapping = [NO_TOPICS, LOADING_ERRORS] * 20
    admin = ScriptedAdmin(flapping, {})
    with pytest.raises(
        KafkaConnectorError, match=BOOTSTRAP, check=lambda e: e.code is KafkaCode.UNAVAILABLE
    ):
        view(admin).settled_latest({("t", 0): 5})


def test_a_partition_is_gone_only_after_consistent_error_free_answers() -> None:
    admin = ScriptedAdmin([metadata({"t": 1})], {("t", 0): 9})
    started = time.monotonic()
    latest = view(admin).settled_latest({("t", 0): 5, ("t", 1): 3})
    assert latest == {("t", 0): 9}  # t-1 confirmed gone
    assert time.monotonic() - started >= CONFIRM_S
    assert admin.metadata_calls > 1


def test_offsets_below_what_was_read_are_waited_for() -> None:
    admin = ScriptedAdmin([LOADED], {("t", 0): 0, ("t", 1): 0})
    cluster = view(admin)

    def back_up() -> None:
        admin.offsets.update({("t", 0): 5, ("t", 1): 7})

    timer = _later(CONFIRM_S / 3, back_up)
    assert cluster.settled_latest({("t", 0): 5, ("t", 1): 7}) == {("t", 0): 5, ("t", 1): 7}
    timer.join()


def test_a_subscribed_topic_absent_is_confirmed_once() -> None:
    admin = ScriptedAdmin([metadata({"other": 1})], {})
    cluster = view(admin)
    started = time.monotonic()
    assert cluster.discover() == []
    assert time.monotonic() - started >= CONFIRM_S
    calls = admin.metadata_calls
    assert cluster.discover() == []  # confirmed absent: no second wait
    assert admin.metadata_calls == calls + 1


def test_named_partitions_wait_for_their_topic_not_for_partitions_never_made() -> None:
    admin = ScriptedAdmin([NO_TOPICS, LOADED], {})
    assert view(admin).discover([("t", 0), ("t", 7)]) == [("t", 0), ("t", 1)]
    assert admin.metadata_calls == 2  # waited for the topic, then took it as listed


def test_a_topic_error_retrying_cannot_fix_is_fatal() -> None:
    admin = ScriptedAdmin([metadata({}, {"t": KafkaError.TOPIC_AUTHORIZATION_FAILED})], {})
    with pytest.raises(
        KafkaConnectorError,
        match="TOPIC_AUTHORIZATION_FAILED",
        check=lambda e: e.code is KafkaCode.SOURCE_FATAL,
    ):
        view(admin).discover()
    assert admin.metadata_calls == 1


def test_cluster_view_pickles_without_its_client() -> None:
    cluster = view(ScriptedAdmin([LOADED], {}))
    clone = pickle.loads(pickle.dumps(cluster))
    assert clone._admin is None


# ---- ReadPosition ----------------------------------------------------------------------


def test_position_carries_what_the_checkpoint_lost_until_spark_has_it_again() -> None:
    pos = ReadPosition()
    assert pos.begin({("t", 0): 3}) == {("t", 0): 3}  # nothing carried: start as given
    begin = {("t", 0): 10, ("t", 1): 4}
    assert pos.carry(begin, {("t", 0): 11}) == {("t", 0): 11, ("t", 1): 4}
    assert pos.begin({("t", 0): 11}) == {("t", 0): 11, ("t", 1): 4}
    assert pos.begin({}) == {("t", 1): 4}
    assert pos.begin({("t", 0): 11, ("t", 1): 4}) == {("t", 0): 11, ("t", 1): 4}
    assert pos.begin({}) == {}  # Spark's checkpoint had t-1 again: nothing left to fill
    pos.carry({("t", 1): 4}, {})
    pos.forget([("t", 1)])
    assert pos.begin({}) == {}
    assert pos.carry({("t", 1): 4}, {}) == {}  # gone: not carried, planning reports it
    pos.seen([("t", 1)])  # in a new end again (a recreated topic): no longer gone
    assert pos.carry({("t", 1): 0}, {}) == {("t", 1): 0}
    assert merge_max({("a", 0): 1}, {("a", 0): 3, ("b", 0): 2}) == {("a", 0): 3, ("b", 0): 2}


def test_an_end_planned_but_not_yet_committed_is_not_a_start() -> None:
    # Spark may ask latestOffset twice from the same start; partitions that the first
    # answer added (new partitions) must still be read from 0, not from that answer.
    admin = ScriptedAdmin([metadata({"t": 2})], {("t", 0): 5, ("t", 1): 7})
    r = reader(admin)
    start = offsets_json(p0=2)
    first = r.latestOffset(start, ReadAllAvailable())
    assert r.latestOffset(start, ReadAllAvailable()) == first == offsets_json(p0=5, p1=7)
    ranges = [p.offset_range for p in r.partitions(start, first)]
    assert [(x.partition, x.start, x.end) for x in ranges] == [(0, 2, 5), (1, 0, 7)]


# ---- the stream reader -------------------------------------------------------------------


def reader(admin: ScriptedAdmin, **extra: str) -> KafkaStreamReader:
    r = KafkaStreamReader(options(**extra))
    r._cluster = view(admin, options(**extra))
    return r


def offsets_json(**parts: int) -> dict[str, dict[str, int]]:
    return {"t": {p[1:]: o for p, o in parts.items()}}


def test_latest_offset_waits_out_a_restart_instead_of_answering_empty() -> None:
    admin = ScriptedAdmin([NO_TOPICS, LOADING_ERRORS, LOADED], {("t", 0): 20, ("t", 1): 30})
    r = reader(admin)
    end = r.latestOffset(offsets_json(p0=10, p1=15), ReadAllAvailable())
    assert end == offsets_json(p0=20, p1=30)


def test_a_confirmed_gone_partition_is_data_loss_before_anything_is_checkpointed() -> None:
    admin = ScriptedAdmin([metadata({"t": 1})], {("t", 0): 20})
    with pytest.raises(
        KafkaConnectorError,
        match="t-1 no longer exists",
        check=lambda e: e.code is KafkaCode.DATA_LOSS,
    ):
        reader(admin).latestOffset(offsets_json(p0=10, p1=15), ReadAllAvailable())
    lenient = reader(admin, failOnDataLoss="false")
    assert lenient.latestOffset(offsets_json(p0=10, p1=15), ReadAllAvailable()) == offsets_json(
        p0=20
    )
    assert ("t", 1) in lenient._position.gone


def test_an_empty_end_from_an_outage_is_no_information() -> None:
    # Release 0.1.0 checkpointed offsets/6 = {} during an outage. The restarted query
    # re-plans batch 6 (start = offsets/5) and then asks for batch 7 from {}.
    admin = ScriptedAdmin([LOADED], {("t", 0): 25, ("t", 1): 40})
    r = reader(admin)
    assert r.partitions(offsets_json(p0=10, p1=15), {}) == []  # no KafkaCode.DATA_LOSS
    # Batch 7 first records where the partitions stood (reads nothing new) ...
    assert r.latestOffset({}, ReadAllAvailable()) == offsets_json(p0=10, p1=15)
    assert r.partitions({}, offsets_json(p0=10, p1=15)) == []
    # ... and batch 8 reads on from there, never from 0.
    end = r.latestOffset(offsets_json(p0=10, p1=15), ReadAllAvailable())
    ranges = [p.offset_range for p in r.partitions(offsets_json(p0=10, p1=15), end)]
    assert [(x.partition, x.start, x.end) for x in ranges] == [(0, 10, 25), (1, 15, 40)]


def test_available_now_never_ends_below_its_frozen_target() -> None:
    admin = ScriptedAdmin([LOADED], {("t", 0): 30, ("t", 1): 30})
    r = reader(admin)
    # Two empty answers are not a confirmed loss however slow the machine is between them
    # (with CONFIRM_S a stalled process confirmed "gone" after the second one).
    r._cluster = view(admin, options(), wait_s=60.0, confirm_s=30.0)
    r.prepareForTriggerAvailableNow()
    assert r._available_now_cap == {("t", 0): 30, ("t", 1): 30}
    # The broker restarts and briefly lists nothing: the next batch waits for it.
    admin.script = [NO_TOPICS, NO_TOPICS, LOADED]
    assert r.latestOffset(offsets_json(p0=0, p1=0), ReadAllAvailable()) == offsets_json(
        p0=30, p1=30
    )


def _later(delay_s: float, fn: Callable[[], None]) -> Any:
    import threading

    timer = threading.Timer(delay_s, fn)
    timer.start()
    return timer


def test_a_stale_topic_verdict_gets_a_new_admin_client(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 38: the AdminClient that lived through a broker restart may refuse the topic
    # locally; the next attempt of the same lookup asks with a new one.
    from connectors.kafka import _client

    stale = ScriptedAdmin([KafkaError(KafkaError._UNKNOWN_TOPIC)], {})
    fresh = ScriptedAdmin([LOADED], {("t", 0): 5, ("t", 1): 7})
    made: list[Any] = []

    def connect_admin(_cluster: Any) -> ScriptedAdmin:
        made.append(fresh)
        return fresh

    monkeypatch.setattr(_client, "connect_admin", connect_admin)
    expected = {("t", 0): 5, ("t", 1): 7}
    assert view(stale, wait_s=60.0, confirm_s=30.0).settled_latest(expected) == expected
    assert stale.metadata_calls == 1 and made == [fresh]
