"""The crash matrix of the txn core, run on the Kafka sink's resource and a real broker.

Every commit-in-task case of the txn crash matrix (``txn.testing.crash_params``:
coordinator, vote and task crashes at every protocol step, both commit modes), once per
producer strategy (the ``producer_strategy`` fixture; ``"reference"``: a new producer per
task; ``"pooled"``: producers kept across epochs by the worker, under the reuse rules). Each case crashes during epoch 1 of 3,
restarts the driver (new epoch log handle, new resource, new back channel, ``recover()``)
and replays; then every row is in the output topic exactly once (read_committed), no
transaction of the sink is left open, every partition's marker and the epoch log say
every epoch committed. The test process plays the one Python worker of every task, so the
pooled strategy reuses, prepares and keeps producers across the crashes here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from connectors.kafka._sink import _pool
from integration_tests.kafka_sink._world import KafkaWorld
from txn import CommitMode, TaskStep
from txn.testing import KAFKA_LIKE, Crash, crash_params, run_crash_case
from txn.testing._crash import EMPTY, FULL


@pytest.fixture(autouse=True)
def empty_pool() -> Iterator[None]:
    """The worker's kept clients of one case are not the next case's."""
    yield
    _pool.POOL.clear()


@pytest.fixture
def world_of(kafka_bootstrap: str, new_topic: Callable[..., str]) -> Callable[..., KafkaWorld]:
    """``world_of(strategy, **options)``: a new sink's world on a new three-partition topic."""

    def make(strategy: str, **options: Any) -> KafkaWorld:
        topic = new_topic("crash", 3)
        world = KafkaWorld(bootstrap=kafka_bootstrap, topic=topic, strategy=strategy, **options)
        world.connector.preflight()  # the marker topic (a driver's first call does it)
        return world

    return make


@pytest.mark.parametrize(("kind", "mode", "crash"), crash_params((KAFKA_LIKE,)))
def test_crash_recover_replay_is_exactly_once(
    world_of: Callable[..., KafkaWorld],
    kind: str,
    mode: CommitMode,
    crash: Crash,
    producer_strategy: str,
) -> None:
    run_crash_case(world_of(producer_strategy, mode=mode), crash)


def test_an_empty_epoch_crashed_after_its_pre_commit_is_exactly_once(
    world_of: Callable[..., KafkaWorld], producer_strategy: str
) -> None:
    # EMPTY: every odd epoch holds no row, so each partition pre-commits an empty
    # transaction with its marker; the crash hits every partition of epoch 1 there.
    world = world_of(producer_strategy, shape=EMPTY)
    run_crash_case(world, Crash(where="task", step=TaskStep.PRE_COMMITTED, after=3))


def test_steady_epochs_set_up_clients_only_under_the_reference_strategy(
    world_of: Callable[..., KafkaWorld], producer_strategy: str
) -> None:
    # What the strategies are for, without crashes: the reference strategy sets up one
    # producer per task and epoch; the pooled one none once its producers are known.
    world = world_of(producer_strategy, shape=FULL)
    world.run_epochs(4)
    world.check_exactly_once(4)
    world.close()
    if producer_strategy == "reference":
        assert world.client_setups == [world.parallelism] * 4
    else:
        assert world.client_setups[0] == world.parallelism  # nothing kept yet
        assert world.client_setups[2:] == [0, 0], world.client_setups
