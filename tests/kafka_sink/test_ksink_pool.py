"""Unit tests of the per-process client pool of the pooled strategy, and of its sink side."""

import os
import pickle
import threading
import time

import pytest

from connectors.kafka import KafkaSink
from connectors.kafka._sink import _pool
from connectors.kafka._sink._producers import pool_key
from connectors.kafka._sink._resource import KafkaResource
from connectors.kafka._sink._reuse import ReusePolicy, ReuseTicket
from connectors.kafka._sink._writer import DeliveryErrors, RecordLayout
from connectors.stage import StageEvent, TaskInfo
from connectors.stage._task import TaskResult


class FakeConsumer:
    """Stands in for a confluent_kafka.Consumer: records close()."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def entry(producer: object = "producer") -> _pool.PoolEntry:
    return _pool.PoolEntry(producer=producer, errors=DeliveryErrors(), consumer=FakeConsumer())  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def empty_pool():
    _pool.POOL.clear()
    yield
    _pool.POOL.clear()


def test_take_returns_what_was_given_back_once():
    e = entry()
    _pool.POOL.give_back(("a",), e)
    assert _pool.POOL.size() == 1
    assert _pool.POOL.take(("a",)) is e
    assert _pool.POOL.take(("a",)) is None  # an entry is never shared
    assert not e.consumer.closed


def test_give_back_replaces_and_releases_the_older_entry():
    old, new = entry(), entry()
    _pool.POOL.give_back(("a",), old)
    _pool.POOL.give_back(("a",), new)
    assert _pool.POOL.take(("a",)) is new
    assert old.consumer is None and old.producer is None


def test_pool_is_bounded():
    entries = [entry() for _ in range(_pool.MAX_ENTRIES + 3)]
    for i, e in enumerate(entries):
        _pool.POOL.give_back((str(i),), e)
    assert _pool.POOL.size() == _pool.MAX_ENTRIES
    assert entries[0].producer is None  # oldest evicted and released
    assert _pool.POOL.take((str(_pool.MAX_ENTRIES + 2),)) is entries[-1]


def test_a_lease_keeps_the_clients_only_when_released_clean():
    pool = _pool.ClientPool()
    pool.give_back(("a",), entry())
    lease = pool.acquire(("a",))
    assert lease.pooled_producer and pool.size() == 0  # leased: out of the pool
    lease.release(clean=True)
    assert pool.size() == 1
    dirty = pool.acquire(("a",))
    dirty.release(clean=False)
    kept = pool.take(("a",))
    assert kept is not None and kept.producer is None and kept.consumer is not None
    plain = pool.acquire(("plain",))
    assert not plain.pooled_producer
    plain.release(clean=False)  # nothing to keep
    assert pool.size() == 0


def test_entries_inherited_through_fork_are_forgotten(monkeypatch):
    _pool.POOL.give_back(("a",), entry())
    monkeypatch.setattr(os, "getpid", lambda: -1)
    assert _pool.POOL.take(("a",)) is None


def test_discard_closes_the_consumer_and_drops_the_producer():
    e = entry()
    consumer = e.consumer
    _pool.discard(e)
    assert consumer.closed and e.producer is None and e.consumer is None


def cfg(**over):
    return KafkaSink("127.0.0.1:9", "out", "s", **over).config


def test_resource_is_unbound_until_its_task_binds_it_and_pickles():
    res = KafkaResource(cfg=cfg(), layout=RecordLayout(key=True))
    assert res.task is None
    bound = res.for_task(
        TaskInfo(partition=0, task_attempt=0, ticket=ReuseTicket(generation="g", stage_run=2))
    )
    assert bound.task is not None and bound.task.ticket is not None
    assert pickle.loads(pickle.dumps(bound)) == bound


def test_pool_key_separates_settings_and_partitions():
    a = cfg()
    b = cfg(producer_config={"linger.ms": "1"})
    assert pool_key(a, 0) != pool_key(a, 1)
    assert pool_key(a, 0) != pool_key(b, 0)
    assert pool_key(a, 0) == pool_key(cfg(), 0)


def test_task_result_with_attempt_pickles():
    result = TaskResult(partition=1, error=b"x", task_attempt=2)
    assert pickle.loads(pickle.dumps(result)) == result


def policy_of(sink: KafkaSink) -> ReusePolicy:
    """The sink's back channel (internal state): the pooled strategy's reuse policy."""
    channel = sink._channels._channels[0]
    assert isinstance(channel, ReusePolicy)
    return channel


def test_sink_starts_a_new_client_generation_on_events_and_after_unpickling():
    sink = KafkaSink("127.0.0.1:9", "out", "s")
    first = policy_of(sink).generation
    sink._channels.event(StageEvent.FAILED_EPOCH)
    assert policy_of(sink).generation != first
    again = pickle.loads(pickle.dumps(sink))
    assert policy_of(again).generation not in (first, policy_of(sink).generation)


@pytest.mark.parametrize("guarantee", ["at-least-once", "at-most-once"])
def test_only_the_pooled_exactly_once_sink_has_a_back_channel(guarantee):
    assert KafkaSink("127.0.0.1:9", "out", "s", guarantee=guarantee)._channels._channels == (None,)
    reference = KafkaSink("127.0.0.1:9", "out", "s", producer_strategy="reference")
    assert reference._channels._channels == (None,)


class FakeProducer:
    pass


def spare(with_consumer: bool = True) -> _pool.Spare:
    consumer = FakeConsumer() if with_consumer else None
    return _pool.Spare(producer=FakeProducer(), errors=DeliveryErrors(), consumer=consumer)  # type: ignore[arg-type]


def wait_for_spares(n: int) -> None:
    import time

    deadline = time.monotonic() + 10
    while _pool.POOL.spares() < n and time.monotonic() < deadline:
        time.sleep(0.01)


def test_spares_are_filled_in_the_background_also_for_keys_with_pooled_clients():
    # A pooled producer goes stale when another worker initializes its id: the next task
    # of that id here needs a spare too.
    _pool.POOL.give_back(("pooled",), entry())
    _pool.POOL.fill_spares({("pooled",): spare, ("a",): spare, ("b",): spare})
    wait_for_spares(3)
    assert _pool.POOL.spares() == 3
    assert _pool.POOL.size() == 1  # the pooled entry is kept beside its spare
    pooled_spare = _pool.POOL.take_spare(("pooled",))
    assert pooled_spare is not None and pooled_spare.consumer is None  # its consumer is pooled
    taken = _pool.POOL.take_spare(("a",))
    assert taken is not None and taken.consumer is not None
    assert _pool.POOL.take_spare(("a",)) is None  # a spare is used once
    _pool.POOL.fill_spares({("b",): spare})  # a key that has its spare gets no second one
    assert _pool.POOL.spares() == 1


def test_spares_are_bounded_and_a_failing_factory_is_skipped():
    def broken(_with_consumer: bool) -> _pool.Spare:
        raise RuntimeError("broker down")

    wanted = {(str(i),): spare for i in range(_pool.MAX_SPARES + 4)}
    wanted[("broken",)] = broken
    _pool.POOL.fill_spares(wanted)
    wait_for_spares(_pool.MAX_SPARES)
    assert _pool.POOL.spares() == _pool.MAX_SPARES
    assert _pool.POOL.take_spare(("broken",)) is None


def test_spares_inherited_through_fork_are_forgotten(monkeypatch):
    _pool.POOL.fill_spares({("a",): spare})
    wait_for_spares(1)
    monkeypatch.setattr(os, "getpid", lambda: -1)
    assert _pool.POOL.take_spare(("a",)) is None


def prepared(key: tuple[str, ...], generation: str = "g") -> _pool.Preparer:
    """A preparer that makes an entry named after ``key`` (stands in for init_transactions)."""

    def make(spare: object, consumer: object) -> tuple[_pool.PoolEntry, _pool.Prepared]:
        made = _pool.PoolEntry(
            producer="p-" + key[0], errors=DeliveryErrors(), consumer=consumer or FakeConsumer()
        )  # type: ignore[arg-type]
        made.token, made.generation = "t-" + key[0], generation
        return made, _pool.Prepared(
            partition=1, lane=1, token=made.token, generation=generation, serial=4
        )

    return make


def wait_for(check: object) -> None:
    deadline = time.monotonic() + 10
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_preparation_is_pooled_and_reported_once_by_its_generation():
    pool = _pool.ClientPool()
    pool.prepare([(("a",), prepared(("a",)))], generation="g", serial=4)
    wait_for(lambda: pool.token_of(("a",)) == "t-a")
    assert pool.take_reports("other", 9) == []
    reports = pool.take_reports("g", 9)
    assert [(r.token, r.serial) for r in reports] == [("t-a", 4)]
    assert pool.take_reports("g", 9) == []
    # told to the driver in the run of ticket 9: that ticket's rounds keep it, later ones not
    pool.prepare(
        [(("a",), made_by("ticket9", 9)), (("b",), made_by("ticket9", 9))], generation="g", serial=9
    )
    wait_for(lambda: pool.token_of(("b",)) == "ticket9")
    assert pool.token_of(("a",)) == "t-a"
    pool.prepare([(("a",), made_by("ticket10", 10))], generation="g", serial=10)
    wait_for(lambda: pool.token_of(("a",)) == "ticket10")


def test_a_lease_drops_the_unreported_preparation_of_its_key_and_none_runs_while_leased():
    pool = _pool.ClientPool()
    pool.prepare([(("a",), prepared(("a",)))], generation="g", serial=4)
    wait_for(lambda: pool.token_of(("a",)) == "t-a")
    lease = pool.acquire(("a",))  # the task reports what serves it, not the preparation
    assert lease.pooled_producer and pool.take_reports("g", 1) == []
    pool.prepare([(("a",), prepared(("a",)))], generation="g", serial=4)  # leased: skipped
    pool.prepare([(("b",), prepared(("b",)))], generation="g", serial=4)
    wait_for(lambda: pool.token_of(("b",)) == "t-b")
    assert pool.token_of(("a",)) is None
    lease.release(clean=True)
    assert pool.token_of(("a",)) == "t-a"


def test_a_failed_preparation_gives_the_entry_back_and_a_lease_waits_for_one_in_flight():
    pool = _pool.ClientPool()
    old = entry()
    old.token = "old"
    pool.give_back(("a",), old)
    started, go = threading.Event(), threading.Event()

    def failing(spare: object, consumer: object) -> tuple[_pool.PoolEntry, _pool.Prepared]:
        assert consumer is old.consumer  # the pooled marker consumer comes along
        started.set()
        go.wait(10)
        raise RuntimeError("init_transactions failed")

    pool.prepare([(("a",), failing)], generation="g", serial=4)
    assert started.wait(10)
    threading.Timer(0.2, go.set).start()
    lease = pool.acquire(("a",))  # waits until the preparation ended
    assert lease.clients is old and not old.consumer.closed
    assert pool.take_reports("g", 1) == []


def made_by(
    round_name: str, serial: int, gate: threading.Event | None = None, generation: str = "g"
) -> _pool.Preparer:
    """A preparer whose instance is named after its round (waits for ``gate`` first)."""

    def make(spare: object, consumer: object) -> tuple[_pool.PoolEntry, _pool.Prepared]:
        if gate is not None:
            assert gate.wait(10)
        made = _pool.PoolEntry(
            producer="p", errors=DeliveryErrors(), consumer=consumer or FakeConsumer()
        )  # type: ignore[arg-type]
        made.token, made.generation, made.serial = round_name, generation, serial
        return made, _pool.Prepared(
            partition=1, lane=1, token=round_name, generation=generation, serial=serial
        )

    return make


def test_a_slow_round_never_replaces_an_instance_a_later_round_prepared_and_reported():
    # Seen in Spark: a round's first key waited 500 ms (librdkafka's coordinator-query
    # timer); the worker's next round prepared the second key, its next task reported it,
    # then the slow round re-initialized that key, fencing the instance the driver knew.
    pool = _pool.ClientPool()
    gate = threading.Event()
    slow = [
        (("a",), made_by("round4", 4, gate)),
        (("b",), made_by("round4", 4)),
        (("c",), made_by("round4", 4)),  # a round takes its keys in order: "c" after "b"
    ]
    pool.prepare(slow, generation="g", serial=4)
    pool.prepare([(("b",), made_by("round6", 6))], generation="g", serial=6)
    wait_for(lambda: pool.token_of(("b",)) == "round6")
    assert [r.token for r in pool.take_reports("g", 8)] == ["round6"]  # the driver learns it
    gate.set()
    wait_for(lambda: pool.token_of(("c",)) == "round4")  # so the slow round got past "b"
    assert pool.token_of(("a",)) == "round4"
    assert pool.token_of(("b",)) == "round6"
    assert [r.token for r in pool.take_reports("g", 10)] == ["round4", "round4"]  # "a", "c"


def test_wait_rounds_returns_once_every_started_round_has_ended():
    pool = _pool.ClientPool()
    assert pool.wait_rounds(0)  # none started
    gate = threading.Event()
    pool.prepare([(("a",), made_by("r1", 1, gate))], generation="g", serial=1)
    pool.prepare([(("b",), made_by("r2", 2))], generation="g", serial=2)
    wait_for(lambda: pool.token_of(("b",)) == "r2")
    assert not pool.wait_rounds(0)  # the gated round still runs
    gate.set()
    assert pool.wait_rounds(10)
    assert pool.token_of(("a",)) == "r1"  # ended means prepared: nothing left to wait for


def test_a_round_replaces_only_a_pooled_producer_of_an_older_ticket_or_generation():
    pool = _pool.ClientPool()
    pool.prepare([(("b",), made_by("round6", 6))], generation="g", serial=6)
    wait_for(lambda: pool.token_of(("b",)) == "round6")
    assert len(pool.take_reports("g", 6)) == 1  # told to the driver in the run of ticket 6
    again = [(("b",), made_by("again", 6)), (("c",), made_by("again", 6))]
    pool.prepare(again, generation="g", serial=6)
    wait_for(lambda: pool.token_of(("c",)) == "again")  # "b" had its turn before
    assert pool.token_of(("b",)) == "round6"
    pool.prepare([(("b",), made_by("round7", 7))], generation="g", serial=7)
    wait_for(lambda: pool.token_of(("b",)) == "round7")
    assert len(pool.take_reports("g", 9)) == 2  # "c" and "b"
    pool.prepare([(("b",), made_by("renewed", 2, generation="h"))], generation="h", serial=2)
    wait_for(lambda: pool.token_of(("b",)) == "renewed")


def test_a_preparation_initializes_a_spare_only_once_it_has_settled():
    # A producer initialized a few ms after its creation waited for librdkafka's 500 ms
    # coordinator-query timer in 3 of 6 traced preparations (benchmarks/HISTORY.md, 6.2).
    pool = _pool.ClientPool()
    pool.fill_spares({("a",): spare})
    wait_for(lambda: pool.spares() == 1)
    called: list[tuple[float, float]] = []

    def make(got: _pool.Spare | None, consumer: object) -> tuple[_pool.PoolEntry, _pool.Prepared]:
        assert got is not None
        called.append((got.created, time.monotonic()))
        return made_by("settled", 4)(got, consumer)

    pool.prepare([(("a",), make)], generation="g", serial=4)
    wait_for(lambda: pool.token_of(("a",)) == "settled")
    [(created, initialized)] = called
    assert initialized - created >= _pool.SPARE_SETTLE_S
