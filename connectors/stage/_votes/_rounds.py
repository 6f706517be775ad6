"""The vote server's state: the rounds of aligned votes and the at-most-once claims.

Guarded by the server's condition (:class:`~connectors.stage._votes._server.VoteServer`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from connectors.stage._votes._codec import VoteTicket, canonical, vote_to_doc
from connectors.stage._votes._framing import error_answer
from txn import Vote

RoundKey = tuple[str, int, int]  # (sink_id, epoch, plan attempt)


@dataclass(kw_only=True)
class Round:
    """Votes of one round; guarded by the server's condition."""

    ticket: VoteTicket
    votes: dict[int, tuple[Vote, str]] = field(default_factory=dict)
    result: list[dict[str, Any]] | None = None
    broken: dict[str, Any] | None = None  # the error answer once the round is broken

    def add(self, vote: Vote) -> dict[str, Any] | None:
        """Record ``vote``; return an error answer if it is not acceptable."""
        t = self.ticket
        if self.broken is not None:  # a broken round never completes: no partial decision
            return self.broken
        if vote.epoch != t.epoch:
            return error_answer(
                "rejected", f"vote for epoch {vote.epoch} in a round of epoch {t.epoch}"
            )
        if not 0 <= vote.partition < t.parallelism:
            return error_answer(
                "rejected", f"partition {vote.partition} is outside 0..{t.parallelism - 1}"
            )
        text = canonical(vote)
        known = self.votes.get(vote.partition)
        if known is not None and known[1] != text:
            return error_answer(
                "rejected",
                f"partition {vote.partition} already voted differently in this stage run",
            )
        self.votes[vote.partition] = (vote, text)
        if self.result is None and len(self.votes) == t.parallelism:
            self.result = [vote_to_doc(self.votes[p][0]) for p in range(t.parallelism)]
        return None


@dataclass
class Claims:
    """At-most-once claims of one plan: the first task attempt to claim a partition owns it."""

    ticket: VoteTicket
    owners: dict[int, int] = field(default_factory=dict)  # partition -> task attempt id

    def claim(self, partition: int, attempt_id: int) -> dict[str, Any]:
        if not 0 <= partition < self.ticket.parallelism:
            return error_answer(
                "rejected", f"partition {partition} is outside 0..{self.ticket.parallelism - 1}"
            )
        owner = self.owners.setdefault(partition, attempt_id)
        return {"ok": True, "granted": owner == attempt_id}
