"""Unit tests of the per-process client pool and of the reuse rule of write tasks."""

import os
import pickle
from dataclasses import replace

import pytest

from connectors.kafka import KafkaSink, _pool
from connectors.kafka._participant import KafkaResource, pool_key
from connectors.kafka._stage import TaskResult, TaskSpec, may_reuse_clients
from connectors.kafka._writer import DeliveryErrors, Layout
from txn import EpochPlan, Marker


class FakeConsumer:
    """Stands in for a confluent_kafka.Consumer: records close()."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def entry(producer: object = "producer") -> _pool.PoolEntry:
    return _pool.PoolEntry(producer, DeliveryErrors(), FakeConsumer(), Marker(3, 10, "c"))  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def empty_pool():
    _pool.clear()
    yield
    _pool.clear()


def test_take_returns_what_was_given_back_once():
    e = entry()
    _pool.give_back(("a",), e)
    assert _pool.size() == 1
    assert _pool.take(("a",)) is e
    assert _pool.take(("a",)) is None  # an entry is never shared
    assert not e.consumer.closed


def test_give_back_replaces_and_releases_the_older_entry():
    old, new = entry(), entry()
    _pool.give_back(("a",), old)
    _pool.give_back(("a",), new)
    assert _pool.take(("a",)) is new
    assert old.consumer is None and old.producer is None


def test_pool_is_bounded():
    entries = [entry() for _ in range(_pool.MAX_ENTRIES + 3)]
    for i, e in enumerate(entries):
        _pool.give_back((str(i),), e)
    assert _pool.size() == _pool.MAX_ENTRIES
    assert entries[0].producer is None  # oldest evicted and released
    assert _pool.take((str(_pool.MAX_ENTRIES + 2),)) is entries[-1]


def test_entries_inherited_through_fork_are_forgotten(monkeypatch):
    _pool.give_back(("a",), entry())
    monkeypatch.setattr(os, "getpid", lambda: -1)
    assert _pool.take(("a",)) is None


def test_discard_closes_the_consumer_and_drops_the_producer():
    e = entry()
    consumer = e.consumer
    _pool.discard(e)
    assert consumer.closed and e.producer is None and e.consumer is None


def plan(attempt: int = 0) -> EpochPlan:
    return EpochPlan("s", 4, 2, "f", attempt=attempt)


def cfg(**over):
    return KafkaSink("127.0.0.1:9", "out", "s", **over).config


def test_only_the_first_attempt_of_the_first_run_reuses():
    spec = TaskSpec(KafkaResource(cfg(), Layout()), plan(), aligned=True)
    assert may_reuse_clients(spec, 0)
    assert not may_reuse_clients(spec, 1)  # Spark task retry
    assert not may_reuse_clients(replace(spec, stage_attempt=1), 0)  # sink's stage re-run
    assert not may_reuse_clients(replace(spec, plan=plan(attempt=1)), 0)  # in-doubt redo


def test_resource_defaults_to_no_reuse_and_pickles():
    res = KafkaResource(cfg(), Layout(key=True))
    assert res.reuse_clients is False and res.generation == ""
    spec = TaskSpec(replace(res, reuse_clients=True, generation="g"), plan(), aligned=False,
                    stage_attempt=2)
    assert pickle.loads(pickle.dumps(spec)) == spec


def test_pool_key_separates_settings_and_partitions():
    a = cfg()
    b = cfg(producer_config={"linger.ms": "1"})
    assert pool_key(a, 0) != pool_key(a, 1)
    assert pool_key(a, 0) != pool_key(b, 0)
    assert pool_key(a, 0) == pool_key(cfg(), 0)


def test_task_result_with_attempt_pickles():
    result = TaskResult(1, error=b"x", task_attempt=2)
    assert pickle.loads(pickle.dumps(result)) == result


def test_sink_starts_a_new_client_generation_on_demand_and_after_unpickling():
    sink = KafkaSink("127.0.0.1:9", "out", "s")
    first = sink._generation  # noqa: SLF001 - the generation is internal state
    sink._new_client_generation()  # noqa: SLF001
    assert sink._generation != first  # noqa: SLF001
    assert pickle.loads(pickle.dumps(sink))._generation not in (first, sink._generation)  # noqa: SLF001
