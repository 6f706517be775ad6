"""Chaos cases run on more than one cluster: the suite's broker and a secured one.

Each function is one test's body on a :class:`~integration_tests.e2e._scenario.Scenario`;
``test_chaos.py`` runs them on the suite's broker, ``integration_tests/secured`` on a
SASL_SSL listener (the scenario carries the client settings, so every client of the run,
the app's, the checker's and ``eos``'s, uses them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from connectors.demo.app import EpochLine, PipelineConfig
from connectors.verify import CheckReport
from integration_tests.e2e._scenario import Scenario, assert_exact, fired
from integration_tests.e2e._together import Case

# Seconds a held task sleeps while the other task commits and kills the app (killed long
# before the sleep ends), and the longest the other task waits for the hold to begin.
HOLD_S = 240.0
# Transaction timeout (ms) of the aligned kill_app run: the held partition's pre-committed
# transaction pins its pending marker until the broker aborts it; short, so reading the
# markers right after the kill does not wait a minute for it.
HELD_TXN_TIMEOUT_MS = 20_000
# Seconds write partition 0 waits, once partition 1 is held mid-write (unaligned), before
# it commits and kills the app: partition 1's rows in flight reach the broker meanwhile
# (librdkafka sends within its linger.ms), so its transaction is open there for certain.
IN_FLIGHT_S = 2.0


def worker_kill_case(scenario: Scenario, mode: str) -> Case:
    """SIGKILL of a Python worker after 10 rows of epoch 1; the query finishes on its own.

    Returned as a case: its query's config and its check.
    """
    scenario.stage()
    plan = scenario.fault_plan(
        [
            {
                "id": "kill",
                "step": "mid_write",
                "epoch": 1,
                "partition": 0,
                "action": "kill",
                "after_rows": 10,
                "times": 1,
            }
        ]
    )

    def check(_epochs: Sequence[EpochLine]) -> None:
        assert fired(plan, "kill") == 1, "the worker kill never fired: the test proved nothing"
        assert_exact(scenario.check())

    # The query must finish on its own: Spark retries the killed task (local[2,4]) in
    # unaligned mode; in aligned mode Spark never retries a barrier result stage, so the
    # sink re-runs the failed write stage itself (stage_retries).
    return Case(scenario.config(fault_plan=plan, mode=mode, stage_retries=2), check)


@dataclass(frozen=True)
class Killed:
    """A case whose first application was killed: the checks of what the kill left, and the
    restart from the same checkpoint as a :class:`Case` (its query's config and check).

    ``after_kill()`` runs after the kill and before the restart; ``finish(epochs)`` is the
    restart's check (``restart.check``), returning the checker's report.
    """

    after_kill: Callable[[], None]
    finish: Callable[[Sequence[EpochLine]], CheckReport]
    config: PipelineConfig

    @property
    def restart(self) -> Case:
        return Case(self.config, self.finish)


def kill_app_with_epoch_partly_committed(scenario: Scenario, mode: str) -> Killed:
    """The whole application SIGKILLed with epoch 1 partly committed; a restart finishes it.

    Runs the application up to the kill; returns the checks of what it left and the restart.
    """
    scenario.stage()
    epoch = 1
    # 1. write partition 1 is held in epoch 1, not committed: unaligned, in the middle of
    #    its rows (its transaction open, no marker in it); aligned, after the all-yes
    #    decision, before its commit (pre-committed, marker pending). Write partition 0
    #    waits until partition 1 is held, commits epoch 1, then SIGKILLs the whole
    #    application (driver, JVM, Python workers) from inside its task.
    unaligned = mode == "unaligned"
    hold: dict[str, object] = (
        {"step": "mid_write", "after_rows": 5} if unaligned else {"step": "before_commit"}
    )
    in_flight = {
        "id": "in_flight",
        "step": "before_commit",
        "epoch": epoch,
        "partition": 0,
        "action": "sleep",
        "seconds": IN_FLIGHT_S,
    }
    plan = scenario.fault_plan(
        [
            {
                "id": "hold",
                "epoch": epoch,
                "partition": 1,
                "action": "sleep",
                "seconds": HOLD_S,
                **hold,
            },
            {
                "id": "wait",
                "step": "before_commit",
                "epoch": epoch,
                "partition": 0,
                "action": "await",
                "waits_for": "hold",
                "seconds": HOLD_S,
            },
            *([in_flight] if unaligned else []),
            {
                "id": "kill_app",
                "step": "after_commit",
                "epoch": epoch,
                "partition": 0,
                "action": "kill_app",
            },
        ]
    )
    first = scenario.config(
        fault_plan=plan, mode=mode, stage_retries=0, transaction_timeout_ms=HELD_TXN_TIMEOUT_MS
    )
    app = scenario.run(first, "first", expect=-9)
    assert fired(plan, "kill_app") == 1, "kill_app never fired: the test proved nothing"
    assert fired(plan, "hold") == 1, "write partition 1 was never held at its step"
    assert fired(plan, "wait") == 1
    assert not app.done
    assert [e.epoch for e in app.epochs] == list(range(epoch))

    def after_kill() -> None:
        # 2. the point of the test: epoch 1 is PARTLY committed.
        markers = scenario.markers(2)
        assert markers[0] is not None and markers[0].epoch == epoch, markers
        assert markers[1] is not None and markers[1].epoch == epoch - 1, markers

    # 3. a new application from the same checkpoint replays epoch 1: partition 0 skips by
    #    its marker, partition 1 (its open transaction aborted by init_transactions)
    #    writes epoch 1 again; the remaining epochs follow.
    def finish(epochs: Sequence[EpochLine]) -> CheckReport:
        assert epoch in {e.epoch for e in epochs}
        report = scenario.check()
        assert_exact(report)
        last = max(e.epoch for e in epochs)
        assert {p: m.epoch if m else None for p, m in scenario.markers(2).items()} == {
            0: last,
            1: last,
        }
        return report

    return Killed(after_kill, finish, scenario.config(mode=mode))
