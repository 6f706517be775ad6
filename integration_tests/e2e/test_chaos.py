"""End-to-end chaos tests: a Spark streaming query writes through KafkaSink while faults hit.

Each test runs the query as separate Spark applications (subprocesses), injects one kind of
fault, lets Spark retry or restarts the application from the same checkpoint, and then checks
every invariant with the checker: nothing lost or duplicated, no aborted data visible, per-key
order kept, no transaction left open, epoch log and markers in agreement.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from connectors.demo.app import AppProcess, EpochLine
from connectors.kafka import DEFAULT_EPOCH_LOG_TOPIC
from connectors.ops import main as eos_main
from connectors.verify import AnomalyKind, CheckReport, load_history
from integration_tests.e2e._cases import (
    Killed,
    kill_app_with_epoch_partly_committed,
    worker_kill_case,
)
from integration_tests.e2e._scenario import (
    APP_RUN_TIMEOUT_S,
    Scenario,
    assert_exact,
    fired,
    topic_maker,
    wait_until,
)
from integration_tests.e2e._together import Case, run_cases

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(900)]

# Seconds for the hand-made zombie producer's transactional calls.
ZOMBIE_TIMEOUT_S = 60.0
# Transaction timeout (ms) of a run whose write task dies before its commit: the checker
# sees the open transaction at once, then reads the markers, which wait for the broker to
# abort it; shorter than the default minute, long enough that it is still open when the
# checker scans the output right after the run.
DIED_TXN_TIMEOUT_MS = 30_000


@pytest.fixture
def scenario(
    kafka_bootstrap: str, tmp_path: Path, new_topic: Callable[..., str], producer_strategy: str
) -> Scenario:
    return Scenario.create(
        kafka_bootstrap, tmp_path, new_topic, producer_strategy=producer_strategy
    )


# The cases whose faults stay inside their own query run side by side in one application
# (``_together``): the worker kills in both modes, the at-most-once task retries, the
# exception between pre-commit and commit, the zombie. Each has its own topics, sink id
# and fault plan, and its own check; one application run instead of five.


@pytest.fixture
def named(
    kafka_bootstrap: str, tmp_path: Path, new_topic: Callable[..., str], producer_strategy: str
) -> Callable[[str], Scenario]:
    """``named(name)``: a scenario of its own in the test's ``tmp_path / name``."""
    return lambda name: Scenario.create(
        kafka_bootstrap, tmp_path / name, new_topic, producer_strategy=producer_strategy
    )


@pytest.mark.compat
def test_worker_kills_task_failures_and_a_zombie_side_by_side(
    named: Callable[[str], Scenario], tmp_path: Path
) -> None:
    cases = {
        "python worker killed mid-write, unaligned": worker_kill_case(
            named("kill-unaligned"), "unaligned"
        ),
        "python worker killed mid-write, aligned": worker_kill_case(
            named("kill-aligned"), "aligned"
        ),
        "at-most-once under task retries": at_most_once_case(named("at-most-once")),
        "exception between pre-commit and commit, aligned": exception_after_pre_commit_case(
            named("exception")
        ),
        "zombie attempt cannot commit": zombie_case(named("zombie")),
    }
    run_cases(cases, tmp_path / "apps", APP_RUN_TIMEOUT_S)


def at_most_once_case(scenario: Scenario) -> Case:
    # A task fails after producing part of its rows; Spark retries it (local[2,4]) and
    # the sink would re-run the stage (stage_retries=2): at-most-once must not write any
    # of those rows again. Losing the rest of the partition is allowed.
    scenario.stage()
    plan = scenario.fault_plan(
        [
            {
                "id": "boom",
                "step": "mid_write",
                "epoch": 1,
                "partition": 0,
                "action": "raise",
                "after_rows": 10,
                "times": 1,
            }
        ]
    )

    def check(_epochs: Sequence[EpochLine]) -> None:
        assert fired(plan, "boom") == 1
        report = scenario.check(verify_epoch_log=False)
        assert report.count(AnomalyKind.DUPLICATE) == 0, report.examples
        assert report.count(AnomalyKind.LOST) > 0, "the retried task wrote its partition again"
        assert report.count(AnomalyKind.ABORTED_READ) == 0

    return Case(
        scenario.config(
            fault_plan=plan, guarantee="at-most-once", mode="unaligned", stage_retries=2
        ),
        check,
    )


def sigterm_stopped(scenario: Scenario) -> Killed:
    """SIGTERM mid-epoch: the application stops after the epoch in flight; a restart ends it."""
    scenario.stage()
    plan = scenario.fault_plan(
        [
            {
                "id": "hold",
                "step": "after_pre_commit",
                "epoch": 1,
                "action": "sleep",
                "seconds": 5.0,
                "times": 2,
            }
        ]
    )
    app = AppProcess(scenario.config(fault_plan=plan), scenario.tmp / "apps", "first").start()
    assert wait_until(lambda: fired(plan, "hold") >= 1), "epoch 1 never reached the hold"
    app.terminate()  # mid-epoch: epoch 1 is pre-committed, its tasks held
    assert app.wait(APP_RUN_TIMEOUT_S) == 0, app.failure_summary()
    assert not app.done
    written = [e for e in app.epochs if e.committed and not e.skipped]
    assert [e.epoch for e in written] == [0, 1], "the epoch in flight finished, no later one"

    def after_stop() -> None:
        partial = scenario.check()
        assert partial.count(AnomalyKind.OPEN_TRANSACTION) == 0
        assert partial.count(AnomalyKind.DUPLICATE) == 0
        assert partial.committed_records == sum(e.rows for e in written)  # whole epochs only

    def finish(_epochs: Sequence[EpochLine]) -> CheckReport:  # the restart writes the rest
        report = scenario.check()
        assert_exact(report)
        return report

    return Killed(after_stop, finish, scenario.config())


def exception_after_pre_commit_case(scenario: Scenario) -> Case:
    scenario.stage()
    plan = scenario.fault_plan(
        [
            {
                "id": "boom",
                "step": "after_pre_commit",
                "epoch": 2,
                "partition": 1,
                "action": "raise",
                "times": 1,
            }
        ]
    )

    def check(_epochs: Sequence[EpochLine]) -> None:
        assert fired(plan, "boom") == 1
        report = scenario.check()
        assert_exact(report)
        # the other task's pre-committed transaction was aborted, and read_committed hid it
        assert report.abort_markers >= 1
        assert report.aborted_records >= 1

    return Case(scenario.config(fault_plan=plan, mode="aligned", stage_retries=2), check)


def whole_application_killed(scenario: Scenario) -> Killed:
    scenario.stage()
    epoch_log = str(scenario.tmp / "epochs.log")
    # 1. the driver SIGKILLs itself (and the app with it) after the write stage of epoch 1,
    #    before logging the epoch complete: every write partition committed, the log says
    #    in doubt. Unaligned mode: each partition committed on its own.
    plan = scenario.fault_plan(
        [{"id": "d", "step": "driver_after_stage", "epoch": 1, "action": "kill", "times": 1}]
    )
    app = scenario.run(
        scenario.config(fault_plan=plan, mode="unaligned", epoch_log=epoch_log), "first", expect=-9
    )
    assert fired(plan, "d") == 1
    assert not app.done

    def after_kill() -> None:
        # Every partition committed, so the checker and the operator read the epoch as
        # committed by its markers, its completion missing as after a deferred completion
        # (docs/architecture.md, "Deferred completion").
        stuck = scenario.check(epoch_log=epoch_log)
        assert stuck.count(AnomalyKind.IN_DOUBT_EPOCH) == 0
        assert stuck.last_committed_epoch == 1
        code = eos_main(
            [
                "--bootstrap-servers",
                scenario.bootstrap,
                "--json",
                "status",
                scenario.sink_id,
                "--epoch-log",
                epoch_log,
                "--topic",
                scenario.output_topic,
            ]
        )
        assert code == 0

    # 2. a new application from the same checkpoint: Spark replays epoch 1, every write
    #    partition finds its marker and skips; the remaining epochs are written.
    def finish(_epochs: Sequence[EpochLine]) -> CheckReport:
        report = scenario.check(epoch_log=epoch_log)
        assert_exact(report)
        return report

    return Killed(after_kill, finish, scenario.config(mode="unaligned", epoch_log=epoch_log))


def test_applications_killed_or_stopped_then_restarted(
    named: Callable[[str], Scenario], tmp_path: Path
) -> None:
    # Four cases, each with its own first application: SIGKILLed with epoch 1 partly
    # committed (aligned, unaligned: _cases), the driver SIGKILLed after the write stage,
    # SIGTERM mid-epoch. What each kill left is checked before any restart; then the four
    # restarts run side by side in one application (_together), each checked on its own.
    # The aligned case goes first: its marker read waits for the broker to abort the held
    # partition's pre-committed transaction (HELD_TXN_TIMEOUT_MS), which the next first
    # runs cover. The unaligned one goes last, so its restart follows its kill as closely
    # as in a test of its own: its held partition's open transaction is still there for
    # the restart to abort.
    killed = {
        "application killed, epoch partly committed, aligned": (
            kill_app_with_epoch_partly_committed(named("kill-app-aligned"), "aligned")
        ),
        "driver killed after the write stage": whole_application_killed(named("driver")),
        "SIGTERM after the epoch in flight": sigterm_stopped(named("sigterm")),
    }
    for case in killed.values():
        case.after_kill()
    last = kill_app_with_epoch_partly_committed(named("kill-app-unaligned"), "unaligned")
    last.after_kill()
    killed["application killed, epoch partly committed, unaligned"] = last
    restarts = {name: case.restart for name, case in killed.items()}
    run_cases(restarts, tmp_path / "restarts", APP_RUN_TIMEOUT_S)


def zombie_case(scenario: Scenario) -> Case:
    scenario.stage()
    # A zombie of write partition 0: the sink's transactional id, a transaction left open
    # holding copies of input records, as a stalled older task attempt would hold it.
    zombie = Producer(
        {
            "bootstrap.servers": scenario.bootstrap,
            "transactional.id": f"{scenario.sink_id}-0",
            "transaction.timeout.ms": 600_000,
        }
    )
    zombie.init_transactions(ZOMBIE_TIMEOUT_S)
    zombie.begin_transaction()
    for rec in scenario.inputs[:5]:
        zombie.produce(scenario.output_topic, key=rec.key, value=rec.value)
    assert zombie.flush(ZOMBIE_TIMEOUT_S) == 0

    # The query's newer attempts of write partition 0 start (and commit) meanwhile.
    def check(epochs: Sequence[EpochLine]) -> None:
        assert {e.epoch for e in epochs} == {0, 1, 2, 3}
        # Now the zombie tries to commit: it must be fenced.
        with pytest.raises(KafkaException) as info:
            zombie.commit_transaction(ZOMBIE_TIMEOUT_S)
        error = info.value.args[0]
        assert error.fatal() or error.txn_requires_abort(), error
        report = scenario.check()
        assert_exact(report)
        assert report.aborted_records >= 5  # the zombie's copies, hidden from read_committed

    return Case(scenario.config(), check)


def test_parallelism_shrinks_and_grows_while_epochs_in_doubt(scenario: Scenario) -> None:
    scenario.stage()
    # 1. parallelism 3, no task retries (local[4]): write partition 2 dies before its commit
    #    in epoch 1 while partitions 0 and 1 commit (unaligned); the job fails, epoch 1 is
    #    in doubt and write partition 2's transaction stays open.
    plan1 = scenario.fault_plan(
        [
            {
                "id": "k",
                "step": "before_commit",
                "epoch": 1,
                "partition": 2,
                "action": "kill",
                "times": 1,
            }
        ],
        "f1",
    )
    scenario.run(
        scenario.config(
            parallelism=3,
            mode="unaligned",
            master="local[4]",
            fault_plan=plan1,
            stage_retries=0,
            transaction_timeout_ms=DIED_TXN_TIMEOUT_MS,
        ),
        "first",
        expect=None,
    )
    assert fired(plan1, "k") == 1
    stuck = scenario.check()
    assert stuck.count(AnomalyKind.IN_DOUBT_EPOCH) == 1
    assert stuck.count(AnomalyKind.OPEN_TRANSACTION) >= 1
    # 2. restart with a smaller parallelism (2): epoch 1 keeps its pinned plan (3); epoch 2
    #    runs with 2 and fails the same way, in doubt again.
    plan2 = scenario.fault_plan(
        [
            {
                "id": "k",
                "step": "before_commit",
                "epoch": 2,
                "partition": 1,
                "action": "kill",
                "times": 1,
            }
        ],
        "f2",
    )
    scenario.run(
        scenario.config(
            parallelism=2, mode="unaligned", master="local[4]", fault_plan=plan2, stage_retries=0
        ),
        "second",
        expect=None,
    )
    assert fired(plan2, "k") == 1
    # 3. restart with a larger parallelism (4): epoch 2 keeps its plan (2), later epochs use 4,
    #    lingering transactions are aborted.
    scenario.run(scenario.config(parallelism=4, mode="unaligned", master="local[4,4]"), "third")
    assert_exact(scenario.check(parallelism=4))
    history = load_history(scenario.bootstrap, scenario.sink_id, None, DEFAULT_EPOCH_LOG_TOPIC)
    planned = {e: history.plan(e) for e in (1, 2, 3)}
    assert {e: p.parallelism for e, p in planned.items() if p is not None} == {1: 3, 2: 2, 3: 4}


@pytest.mark.skipif(
    bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")),
    reason="restarts a broker it owns; an external cluster (KAFKA_BOOTSTRAP_SERVERS) cannot be "
    "restarted by the test",
)
def test_broker_restarted_during_commits(tmp_path: Path, producer_strategy: str) -> None:

    from minikafka import BrokerProcess

    with BrokerProcess(data_dir=str(tmp_path / "broker"), port=0) as broker:
        make_topic = topic_maker(broker.bootstrap_servers)

        sc = Scenario.create(
            broker.bootstrap_servers, tmp_path, make_topic, producer_strategy=producer_strategy
        )
        epochs = sc.stage()
        app = AppProcess(sc.config(), tmp_path / "apps", name="run").start()
        assert app.wait_for(lambda a: len(a.epochs) >= 1, 300), app.stderr_tail()
        broker.restart()  # same port, same data dir; the next epochs commit across it
        code = app.wait(400)
        assert code == 0, app.stderr_tail()
        assert {e.epoch for e in app.epochs} == set(range(epochs))
        assert_exact(sc.check())
