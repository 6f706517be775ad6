r"""The epoch state machine.

States and the records that move an epoch between them::

    NEW --plan--> PLANNED --decision(commit)--> COMMIT_DECIDED --completion--> COMMITTED
                  |  ^  \--decision(abort)---> ABORT_DECIDED  --completion--> ABORTED
                  |  |                                                            |
                  |  +--plan (retry, attempt+1, same parallelism)                 |
                  |  +------------------------plan (new attempt, attempt+1)-------+
                  +--completion(committed)--> COMMITTED   (commit-in-task, at-least/most-once)
                  +--completion(aborted)----> ABORTED     (rolled back without a decision)
    COMMIT_DECIDED --plan (redo, attempt+1, same parallelism)--> COMMIT_DECIDED

``COMMITTED`` is final. ``COMMIT_DECIDED`` can only move to ``COMMITTED``, or stay
``COMMIT_DECIDED`` under a redo plan (a pinned retry, attempt+1, that redoes partitions
whose prepared work was lost; the decision stays logged): a logged commit decision is
never rolled back (the core rule of two-phase commit).
"""

from __future__ import annotations

import enum

from txn._errors import TxnCode, TxnError


class EpochState(str, enum.Enum):
    """Where an epoch stands in the protocol, as folded from the epoch log."""

    NEW = "new"
    PLANNED = "planned"
    COMMIT_DECIDED = "commit-decided"
    ABORT_DECIDED = "abort-decided"
    COMMITTED = "committed"
    ABORTED = "aborted"

    @property
    def is_final(self) -> bool:
        """True only for ``COMMITTED``: the epoch's effect is applied and never changes."""
        return self is EpochState.COMMITTED

    @property
    def in_doubt(self) -> bool:
        """True when the epoch was planned but is not finished (needs recovery or replay)."""
        return self in (EpochState.PLANNED, EpochState.COMMIT_DECIDED, EpochState.ABORT_DECIDED)

    def successors(self) -> frozenset[EpochState]:
        """Return the states this state may move to."""
        return _TRANSITIONS[self]

    def can_transition(self, to: EpochState) -> bool:
        """Return whether moving from this state to ``to`` is legal."""
        return to in _TRANSITIONS[self]

    def transition(self, to: EpochState, *, epoch: int | None = None) -> EpochState:
        """Return ``to`` if the move is legal, else raise :class:`TxnCode.ILLEGAL_TRANSITION`.

        Args:
            to: the requested next state.
            epoch: the epoch concerned, only used to make the error message precise.

        """
        if to in _TRANSITIONS[self]:
            return to
        legal = ", ".join(sorted(s.value for s in _TRANSITIONS[self])) or "none (final)"
        where = f"epoch {epoch}" if epoch is not None else "an epoch"
        msg = (
            f"illegal transition of {where}: {self.value} -> {to.value} (legal next states: "
            f"{legal}); a protocol step ran out of order or two coordinators share one log"
        )
        raise TxnError(msg, code=TxnCode.ILLEGAL_TRANSITION)


_S = EpochState
_TRANSITIONS: dict[EpochState, frozenset[EpochState]] = {
    _S.NEW: frozenset({_S.PLANNED}),
    _S.PLANNED: frozenset(
        {_S.PLANNED, _S.COMMIT_DECIDED, _S.ABORT_DECIDED, _S.COMMITTED, _S.ABORTED}
    ),
    _S.COMMIT_DECIDED: frozenset({_S.COMMIT_DECIDED, _S.COMMITTED}),
    _S.ABORT_DECIDED: frozenset({_S.ABORTED}),
    _S.ABORTED: frozenset({_S.PLANNED}),
    _S.COMMITTED: frozenset(),
}
