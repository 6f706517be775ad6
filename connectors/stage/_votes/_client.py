"""The task side of a vote round: send the own vote, wait for everybody's."""

from __future__ import annotations

import socket
from typing import Any

from connectors.stage._errors import StageCode, StageError
from connectors.stage._votes._codec import PROTOCOL_VERSION, VoteTicket, vote_from_doc, vote_to_doc
from connectors.stage._votes._framing import (
    MAX_MESSAGE_BYTES,
    TooLargeError,
    recv_message,
    send_message,
)
from txn import GATHER_TIMEOUT_S, Vote

# Seconds for a task's TCP connect to the driver (a busy driver accepts late).
CONNECT_TIMEOUT_S = 30.0
# Seconds a task waits for the answer to a claim (answered at once, without waiting for
# other tasks; generous for a busy driver).
READ_TIMEOUT_S = 30.0
# Seconds a task waits for the answer beyond GATHER_TIMEOUT_S, so that the server's own
# timeout answer arrives first and the whole round breaks together.
REPLY_MARGIN_S = 15.0


def gather_votes(
    ticket: VoteTicket, vote: Vote, *, reply_timeout_s: float = GATHER_TIMEOUT_S + REPLY_MARGIN_S
) -> list[Vote]:
    """Send ``vote`` to the driver and return every partition's vote (run in the task).

    Raises:
        StageCode.VOTE_TIMEOUT: the round did not complete in time (the caller must abort).
        StageCode.VOTE_REJECTED: the server refused the vote (wrong token, stale round, ...).
        StageCode.VOTE_CHANNEL: the driver cannot be reached or answered garbage.

    """
    request = {**_round_fields(ticket), "vote": vote_to_doc(vote)}
    answer, where = _exchange(ticket, request, reply_timeout_s)
    return _parse_answer(answer, where)


def claim_partition(ticket: VoteTicket, partition: int, attempt_id: int) -> bool:
    """Ask the driver whether task attempt ``attempt_id`` may write ``partition`` (at-most-once).

    The first attempt that claims a partition of the round owns it: True for it (also
    when it asks again), False for every other attempt.

    Raises:
        StageCode.VOTE_REJECTED / StageCode.VOTE_CHANNEL: as :func:`gather_votes`; the caller must not write.

    """
    request = {
        **_round_fields(ticket),
        "op": "claim",
        "partition": partition,
        "attempt_id": attempt_id,
    }
    answer, where = _exchange(ticket, request, READ_TIMEOUT_S)
    if isinstance(answer, dict) and answer.get("ok") is True:
        granted = answer.get("granted")
        if isinstance(granted, bool):
            return granted
    _parse_answer(answer, where)  # raises the typed refusal
    msg = f"the vote server at {where} answered a claim without a verdict"
    raise StageError(msg, code=StageCode.VOTE_CHANNEL)


def _round_fields(ticket: VoteTicket) -> dict[str, Any]:
    return {
        "v": PROTOCOL_VERSION,
        "sink_id": ticket.sink_id,
        "epoch": ticket.epoch,
        "plan_attempt": ticket.plan_attempt,
        "stage_run": ticket.stage_run,
        "token": ticket.token,
    }


def _exchange(
    ticket: VoteTicket, request: dict[str, Any], reply_timeout_s: float
) -> tuple[Any, str]:
    """Send ``request`` to the ticket's server; return its answer and the server's address."""
    where = f"{ticket.host}:{ticket.port}"
    try:
        sock = socket.create_connection((ticket.host, ticket.port), timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        msg = (
            f"cannot reach the driver's vote server at {where} ({exc}); executors must be "
            "able to connect to the driver, otherwise use vote_channel='barrier'"
        )
        raise StageError(msg, code=StageCode.VOTE_CHANNEL) from exc
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            send_message(sock, request)
            answer = recv_message(
                sock, MAX_MESSAGE_BYTES * (ticket.parallelism + 1), reply_timeout_s
            )
        except TimeoutError as exc:
            msg = f"no answer from the vote server at {where} within {reply_timeout_s:.0f}s"
            raise StageError(msg, code=StageCode.VOTE_TIMEOUT) from exc
        except (OSError, ValueError, TooLargeError) as exc:
            msg = f"vote exchange with {where} failed: {exc}"
            raise StageError(msg, code=StageCode.VOTE_CHANNEL) from exc
    return answer, where


def _parse_answer(answer: Any, where: str) -> list[Vote]:
    if not isinstance(answer, dict):
        msg = f"the vote server at {where} answered a non-object"
        raise StageError(msg, code=StageCode.VOTE_CHANNEL)
    if answer.get("ok") is True:
        raw = answer.get("votes")
        if not isinstance(raw, list):
            msg = f"the vote server at {where} answered without a vote list"
            raise StageError(msg, code=StageCode.VOTE_CHANNEL)
        try:
            return [vote_from_doc(doc) for doc in raw]
        except ValueError as exc:
            msg = f"the vote server at {where} answered a malformed vote: {exc}"
            raise StageError(msg, code=StageCode.VOTE_CHANNEL) from exc
    text = f"vote server at {where}: {answer.get('error')}"
    if answer.get("code") == "timeout":
        raise StageError(text, code=StageCode.VOTE_TIMEOUT)
    raise StageError(text, code=StageCode.VOTE_REJECTED)
