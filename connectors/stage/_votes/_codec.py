"""What travels in a vote round: the ticket (in the task spec) and the vote document (JSON)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from txn import Vote
from txn._model import VoteKind

PROTOCOL_VERSION = 1
# Characters of a NO vote's error text that are sent (the task raises the full error).
MAX_ERROR_CHARS = 2_000


@dataclass(frozen=True, kw_only=True)
class VoteTicket:
    """What a write task needs to vote in one round (picklable; travels in the task spec)."""

    host: str
    port: int
    sink_id: str
    epoch: int
    plan_attempt: int
    stage_run: int
    parallelism: int
    token: str = field(repr=False)


def vote_to_doc(vote: Vote) -> dict[str, Any]:
    """Return ``vote`` as a JSON-ready dict (error text cut to :data:`MAX_ERROR_CHARS`)."""
    error = vote.error if vote.error is None else vote.error[:MAX_ERROR_CHARS]
    return {
        "epoch": vote.epoch,
        "partition": vote.partition,
        "kind": vote.kind.value,
        "rows": vote.rows,
        "checksum": vote.checksum,
        "error": error,
    }


def vote_from_doc(doc: Any) -> Vote:
    """Parse a vote dict, checking every field's type.

    Raises:
        ValueError: the document is not a well-formed vote.

    """
    if not isinstance(doc, dict):
        msg = f"a vote must be a JSON object, got {type(doc).__name__}"
        raise ValueError(msg)
    ints = [doc.get(k) for k in ("epoch", "partition", "rows")]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ints):
        msg = "vote fields epoch, partition and rows must be integers"
        raise ValueError(msg)
    error = doc.get("error")
    if not isinstance(doc.get("checksum"), str) or not (error is None or isinstance(error, str)):
        msg = "vote field checksum must be a string and error a string or null"
        raise ValueError(msg)
    return Vote(
        epoch=doc["epoch"],
        partition=doc["partition"],
        kind=VoteKind(doc.get("kind")),
        rows=doc["rows"],
        checksum=doc["checksum"],
        error=error,
    )


def canonical(vote: Vote) -> str:
    """Return the canonical JSON text of ``vote`` (equal votes, equal text)."""
    return json.dumps(vote_to_doc(vote), sort_keys=True, separators=(",", ":"))
