"""The participants' state machine: legal moves, calls out of order, failed steps."""

from __future__ import annotations

import pytest

from connectors.stage._states import ParticipantState, ParticipantStateMachine

S = ParticipantState
MOVES = {
    S.OPENED: frozenset({S.READY}),
    S.READY: frozenset({S.IN_TXN, S.DONE}),
    S.IN_TXN: frozenset({S.DONE}),
    S.DONE: frozenset(),
    S.FAILED_IN_TXN: frozenset({S.DEAD}),
    S.DEAD: frozenset(),
}


class OutOfOrder(Exception):
    pass


def test_steps_move_along_the_table() -> None:
    states = ParticipantStateMachine(MOVES, "partition 0")
    with states.step(S.READY, S.FAILED):
        pass
    states.move(S.IN_TXN)
    assert states.state is S.IN_TXN


def test_a_call_out_of_order_raises_the_connectors_error_before_running() -> None:
    states = ParticipantStateMachine(MOVES, "partition 3", error=OutOfOrder)
    ran = []
    with pytest.raises(OutOfOrder, match="partition 3: call out of order, opened -> done"):
        with states.step(S.DONE, S.FAILED):
            ran.append(1)
    assert ran == [] and states.state is S.OPENED


def test_a_failed_step_moves_to_the_failure_state_of_where_it_began() -> None:
    states = ParticipantStateMachine(MOVES, "p", start=S.READY)
    with pytest.raises(ValueError, match="boom"):
        with states.step(S.IN_TXN, lambda start: S.FAILED_IN_TXN if start is S.READY else S.FAILED):
            raise ValueError("boom")
    assert states.state is S.FAILED_IN_TXN


def test_dead_is_sticky() -> None:
    states = ParticipantStateMachine(MOVES, "p", start=S.FAILED_IN_TXN)
    states.move(S.DEAD)
    states.fail(S.FAILED)
    assert states.state is S.DEAD
