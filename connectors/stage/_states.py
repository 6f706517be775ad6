"""The state machine of a participant: one enum of states, one table of legal moves.

Every connector's participant (Kafka, PostgreSQL) tracks where it stands in the
:class:`txn.Participant` contract with a :class:`ParticipantStateMachine` over its own table of
moves between the shared :class:`ParticipantState` values. A call out of contract order
raises before it touches the engine; a failed step moves to the failure state the
participant names, so :meth:`~txn.Participant.abort` and ``close`` know what is left to undo.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterator, Mapping


class ParticipantState(str, enum.Enum):
    """Where a participant stands; each participant allows its own moves between them."""

    OPENED = "opened"  # engine ready (older instances fenced), marker not read
    READY = "ready"  # marker read
    IN_TXN = "in-transaction"  # transaction begun
    WRITTEN = "written"  # rows written into the transaction
    PRE_COMMITTED = "pre-committed"  # flushed, marker in the transaction, not committed
    PREPARED = "prepared"  # two-phase: prepared (durable, invisible)
    DONE = "done"  # committed or aborted cleanly
    FAILED_IN_TXN = "failed-in-transaction"  # a call failed with a transaction open
    FAILED = "failed"  # a call failed, no transaction open
    DEAD = "dead"  # fenced or fatal: the engine handle is never called again


Moves = Mapping[ParticipantState, frozenset[ParticipantState]]


class ParticipantStateMachine:
    """The current state of one participant and the legal moves from it.

    ``where`` names the participant in errors; ``error`` is the exception type a call out
    of order raises (the connector's own).
    """

    def __init__(
        self,
        moves: Moves,
        where: str,
        *,
        error: type[Exception] = RuntimeError,
        start: ParticipantState = ParticipantState.OPENED,
    ) -> None:
        self._moves = moves
        self._where = where
        self._error = error
        self.state = start

    def __repr__(self) -> str:
        return f"ParticipantStateMachine({self._where}: {self.state.value})"

    def check(self, to: ParticipantState) -> None:
        """Raise ``error`` unless the participant may move to ``to`` now."""
        if to not in self._moves[self.state]:
            legal = ", ".join(sorted(s.value for s in self._moves[self.state])) or "none"
            msg = (
                f"{self._where}: call out of order, {self.state.value} -> {to.value} (legal: "
                f"{legal}); txn._task.run_partition calls the participant in contract order"
            )
            raise self._error(msg)

    def move(self, to: ParticipantState) -> None:
        """Move to ``to`` (raises ``error`` if the move is not legal)."""
        self.check(to)
        self.state = to

    def fail(self, to: ParticipantState) -> None:
        """Record a failure: move to ``to`` unless the participant is already DEAD."""
        if self.state is not ParticipantState.DEAD:
            self.state = to

    @contextlib.contextmanager
    def step(
        self,
        to: ParticipantState,
        failed: ParticipantState | Callable[[ParticipantState], ParticipantState],
    ) -> Iterator[None]:
        """Run one contract step: checked first; on success move to ``to``, else to ``failed``.

        ``failed`` is a state or a function of the state the step started from.
        """
        self.check(to)
        start = self.state
        try:
            yield
        except BaseException:
            self.fail(failed(start) if callable(failed) else failed)
            raise
        self.move(to)
