"""Unit tests of the producer-lane claim (connectors/kafka/_sink/_lanes.py).

Each ``LaneClaims`` plays one Python worker: ``flock`` locks of separate opens conflict
also inside one process, so two claim sets here behave like two workers of one host.
"""

from __future__ import annotations

import logging
import multiprocessing
from pathlib import Path

import pytest

from connectors.kafka._sink._lanes import SHARED_LANE, Lane, LaneClaims


@pytest.fixture
def workers(tmp_path: Path):
    made: list[LaneClaims] = []

    def make() -> LaneClaims:
        claims = LaneClaims(tmp_path)
        made.append(claims)
        return claims

    yield make
    for claims in made:
        claims.release()


def test_each_worker_of_a_host_claims_its_own_worker_lane_and_keeps_it(workers):
    a, b = workers(), workers()
    assert a.claim("s", 2) == Lane(1, claimed=True)
    assert b.claim("s", 2) == Lane(2, claimed=True)
    assert a.claim("s", 2) == Lane(1, claimed=True)  # kept for the process's life
    assert b.claim("s", 2) == Lane(2, claimed=True)


def test_no_worker_claims_the_shared_lane(workers):
    assert SHARED_LANE == 0
    claims = [workers() for _ in range(3)]
    got = [c.claim("s", 3) for c in claims]
    assert [lane.index for lane in got] == [1, 2, 3]
    assert all(lane.claimed for lane in got)


def test_a_worker_beyond_the_lanes_writes_on_the_shared_lane_until_one_is_free(workers):
    a, b, c = workers(), workers(), workers()
    a.claim("s", 2)
    b.claim("s", 2)
    assert c.claim("s", 2) == Lane(SHARED_LANE, claimed=False)
    a.release()  # worker a exited
    assert c.claim("s", 2) == Lane(1, claimed=True)


def test_a_worker_finding_every_lane_held_warns_once_per_sink(workers, caplog):
    a, b, c = workers(), workers(), workers()
    a.claim("s", 2)
    b.claim("s", 2)
    with caplog.at_level(logging.WARNING, logger="connectors.kafka.sink.lanes"):
        assert not c.claim("s", 2).claimed
        assert not c.claim("s", 2).claimed  # asked again: no second warning
        assert a.claim("s", 2).claimed  # a holder never warns
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "sink s: all 2 producer lanes" in warnings[0]
    assert "Set producer_lanes to the Python workers per executor" in warnings[0]


def test_lanes_are_claimed_per_sink(workers):
    a, b = workers(), workers()
    assert a.claim("s", 2).index == 1
    assert b.claim("t", 2).index == 1
    assert b.claim("s", 2).index == 2


def test_fewer_lanes_claim_again_within_the_new_count(workers):
    a, b = workers(), workers()
    a.claim("s", 3)
    assert b.claim("s", 3).index == 2
    assert b.claim("s", 1) == Lane(SHARED_LANE, claimed=False)  # lane 1 is a's
    assert a.claim("s", 1) == Lane(1, claimed=True)  # within the new count: kept


def _hold_lane(directory: str, ready, done) -> None:  # type: ignore[no-untyped-def]
    claims = LaneClaims(Path(directory))
    ready.put(claims.claim("s", 2).index)
    done.wait(30)


def test_a_lane_is_freed_when_its_process_exits(tmp_path: Path, workers):
    ctx = multiprocessing.get_context("spawn")
    ready, done = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_hold_lane, args=(str(tmp_path), ready, done))
    child.start()
    try:
        assert ready.get(timeout=30) == 1
        mine = workers()
        assert mine.claim("s", 2).index == 2  # the other worker holds lane 1
        other = workers()
        assert not other.claim("s", 2).claimed
    finally:
        done.set()
        child.join(30)
    assert child.exitcode == 0
    assert other.claim("s", 2) == Lane(1, claimed=True)
