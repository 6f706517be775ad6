"""A model-based test of ordinary use: random sequences of what users do every day.

Hypothesis' stateful testing drives one sink of each kind (Kafka aligned/unaligned,
PostgreSQL two-phase/idempotency table, ``CompositeSink`` over both) through a real
streaming query (a JSON file source, one file per micro-batch) and checks the output
against a simple model after every step. The steps: batches of 0 rows (an empty file, or
rows a filter drops), 1 row and many (also all with one key, so one write partition gets
everything), an exception at a protocol step (the query fails, its restart replays the
batch), ``query.stop()`` between batches or while an epoch runs, a restart from the
checkpoint with the same or a new sink object (closed or just dropped), the same batch id
written again outside the query, ``start_over`` with a new checkpoint, and a restart of
the broker or the database (clean or killed) when the test owns them.

The model: every row of a batch the query completed is in each output exactly once; a row
of a batch whose epoch failed or was stopped is there at most once (parts of it may show
early in unaligned and idempotency-table modes, as documented) until the restarted query
replays the batch, after which it is there exactly once; nothing else is ever there.

Default run: ``EOS_MODEL_EXAMPLES`` examples (3) of ``EOS_MODEL_STEPS`` steps (7) per kind.
The long run (``--model-long``, as ``make model-long`` runs it; skipped otherwise, so not
in ``make test``): more kinds and 25 examples of 12 steps each unless the variables say
otherwise.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from integration_tests.model._world import DROPPED_KEY, KINDS, LONG_KINDS, Kind, Servers, World

pytestmark = pytest.mark.spark

EXAMPLES = int(os.environ.get("EOS_MODEL_EXAMPLES", "3"))
STEPS = int(os.environ.get("EOS_MODEL_STEPS", "7"))
LONG_EXAMPLES = int(os.environ.get("EOS_MODEL_EXAMPLES", "25"))
LONG_STEPS = int(os.environ.get("EOS_MODEL_STEPS", "12"))
# Seconds one test (all examples of one kind, shrinking included) may take.
DEFAULT_RUN_TIMEOUT_S = 1200
LONG_RUN_TIMEOUT_S = 4 * 3600

# Batch shapes: how many rows, and how they are keyed.
SHAPES = ("empty-file", "all-filtered", "one-row", "many-rows", "many-one-key")
MANY_ROWS = 40
TASK_STEPS = ("after_open", "mid_write", "after_pre_commit", "before_commit", "after_commit")
DRIVER_STEPS = (
    "driver_after_plan",
    "driver_after_stage",
    "driver_before_complete",
    "driver_after_decision",
)

_ids = itertools.count(1)


def _rows(shape: str) -> list[tuple[int, str]]:
    if shape == "empty-file":
        return []
    if shape == "all-filtered":
        return [(next(_ids), DROPPED_KEY) for _ in range(3)]
    if shape == "one-row":
        return [(next(_ids), "k1")]
    if shape == "many-one-key":
        return [(next(_ids), "k0") for _ in range(MANY_ROWS)]
    return [(i, f"k{i}") for i in (next(_ids) for _ in range(MANY_ROWS))]


def machine_for(kind: Kind, spark: Any, servers: Servers, tmp: Callable[[], Path]) -> type:
    """The state machine class for one sink kind (module docstring)."""

    class OrdinaryUse(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.world = World(kind, spark, servers, tmp())
            self.committed: set[int] = set()  # rows every output must hold exactly once
            self.pending: set[int] = set()  # rows of written batches not known complete
            self.done: list[int] = []  # batch indexes of this checkpoint known complete
            self.settled = True  # False while an epoch may be in doubt (failed or stopped)

        # -- set-up and tear-down ------------------------------------------------------
        @initialize()
        def start(self) -> None:
            self.world.create()
            self.world.start_query()

        def teardown(self) -> None:
            self.world.close()

        # -- model updates ---------------------------------------------------------------
        def _send(self, shape: str) -> int:
            rows = _rows(shape)
            self.pending |= {i for i, k in rows if k != DROPPED_KEY}
            return self.world.write_batch(rows)

        def _completed(self) -> None:
            self.committed |= self.pending
            self.pending.clear()
            self.settled = True
            self.done = list(range(self.world.files))

        def _run(self) -> bool:
            ok = self.world.run_pending()
            if ok:
                self._completed()
            else:
                self.settled = False
            return ok

        # -- rules: what users do ----------------------------------------------------------
        @precondition(lambda self: self.world.query is not None)
        @rule(shape=st.sampled_from(SHAPES))
        def batch(self, shape: str) -> None:
            self._send(shape)
            assert self._run(), "a batch without faults failed"

        @precondition(lambda self: self.world.query is not None)
        @rule(shape=st.sampled_from(SHAPES), step=st.sampled_from(TASK_STEPS + DRIVER_STEPS))
        def batch_raising_at(self, shape: str, step: str) -> None:
            self.world.arm(step, "raise")
            self._send(shape)
            try:
                self._run()  # the fault may not fire: no rows to write, no decision to log
            finally:
                self.world.disarm()

        @precondition(lambda self: self.world.query is not None)
        @rule(shape=st.sampled_from(SHAPES), step=st.sampled_from(TASK_STEPS + DRIVER_STEPS))
        def stop_while_epoch_runs(self, shape: str, step: str) -> None:
            fault = self.world.arm(step, "sleep", seconds=2.0)
            index = self._send(shape)
            self.settled = False
            try:
                self.world.wait_fired(fault, index)
                self.world.stop_query()
            finally:
                self.world.disarm()

        @precondition(lambda self: self.world.query is not None)
        @rule()
        def stop(self) -> None:
            self.world.stop_query()

        @precondition(lambda self: self.world.query is None)
        @rule(new_sink=st.sampled_from(("same", "new-after-close", "new-without-close")))
        def restart(self, new_sink: str) -> None:
            if new_sink == "new-after-close":
                self.world.close_sink()
            if new_sink != "same":
                self.world.sink = self.world.make_sink()
            self.world.start_query()
            assert self._run(), "the restarted query failed replaying its batches"

        @precondition(lambda self: self.world.query is None and bool(self.done))
        @rule(data=st.data())
        def same_batch_again(self, data: st.DataObject) -> None:
            index = data.draw(st.sampled_from(self.done), label="batch")
            result = self.world.sink(self.world.batch_frame(index), index)
            assert result.skipped, f"batch {index} was written again: {result}"

        # start_over is refused while an epoch is in doubt (docs/operations.md): only after
        # the previous query ended cleanly.
        @precondition(lambda self: self.world.query is None and self.settled)
        @rule()
        def start_over(self) -> None:
            self.world.start_over()
            self.done = []
            self.world.start_query()

        @precondition(lambda self: servers.broker is not None and kind.kafka)
        @rule(kill=st.booleans())
        def restart_broker(self, kill: bool) -> None:
            if kill:
                servers.broker.kill()
            servers.broker.restart()

        @precondition(lambda self: servers.postgres is not None and kind.protocol is not None)
        @rule(kill=st.booleans())
        def restart_database(self, kill: bool) -> None:
            if kill:
                servers.postgres.kill()
                servers.postgres.start()
            else:
                servers.postgres.restart()

        # -- the checks ----------------------------------------------------------------------
        @invariant()
        def output_matches_the_model(self) -> None:
            if not hasattr(self, "world") or self.world.sink is None:
                return
            for name, ids in self.world.outputs().items():
                twice = sorted(i for i, n in ids.items() if n > 1)
                assert not twice, f"{name}: rows written more than once: {twice[:10]}"
                missing = sorted(self.committed - set(ids))
                assert not missing, f"{name}: rows of completed batches missing: {missing[:10]}"
                extra = sorted(set(ids) - self.committed - self.pending)
                assert not extra, f"{name}: rows nobody wrote: {extra[:10]}"
            if self.settled:
                assert not self.world.leftovers(), self.world.leftovers()

    OrdinaryUse.__name__ = f"OrdinaryUse_{kind.name.replace('-', '_')}"
    return OrdinaryUse


def _run(
    kind: Kind, spark: Any, servers: Servers, tmp_path_factory: Any, examples: int, steps: int
) -> None:
    counter = itertools.count()

    def tmp() -> Path:
        return Path(tmp_path_factory.mktemp(f"model-{kind.name}-{next(counter)}"))

    machine = machine_for(kind, spark, servers, tmp)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )


@pytest.mark.timeout(DEFAULT_RUN_TIMEOUT_S)
@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_ordinary_use(
    kind: Kind, spark: Any, model_servers: Servers, tmp_path_factory: Any
) -> None:
    _run(kind, spark, model_servers, tmp_path_factory, EXAMPLES, STEPS)


@pytest.mark.model_long
@pytest.mark.timeout(LONG_RUN_TIMEOUT_S)
@pytest.mark.parametrize("kind", LONG_KINDS, ids=[k.name for k in LONG_KINDS])
def test_ordinary_use_long(
    kind: Kind, spark: Any, model_servers: Servers, tmp_path_factory: Any
) -> None:
    _run(kind, spark, model_servers, tmp_path_factory, LONG_EXAMPLES, LONG_STEPS)
