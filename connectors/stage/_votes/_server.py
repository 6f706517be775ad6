"""The driver side of the vote channel: rounds of votes and the TCP server answering them."""

from __future__ import annotations

import atexit
import contextlib
import logging
import secrets
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from typing import Any

from connectors.stage._errors import StageCode, StageError
from connectors.stage._votes._codec import PROTOCOL_VERSION, VoteTicket, vote_from_doc
from connectors.stage._votes._framing import (
    MAX_MESSAGE_BYTES,
    TooLargeError,
    error_answer,
    recv_message,
    send_message,
)
from connectors.stage._votes._rounds import Claims, Round, RoundKey
from txn import GATHER_TIMEOUT_S, EpochPlan, Vote

log = logging.getLogger("connectors.stage.votes")

# Pending-connection backlog of the listening socket: one connection per write task.
BACKLOG = 128
# Connections served at once; beyond it a connection is answered "busy" and closed.
MAX_CONNECTIONS = 1_024
# Seconds a connected task may take to send its small vote message (bounds idle peers).
READ_TIMEOUT_S = 30.0
# Seconds between the serving thread's checks for shutdown (only delays close()).
SHUTDOWN_POLL_S = 0.5
# Seconds close() waits for the serving thread to stop.
STOP_TIMEOUT_S = 5.0


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = False
    request_queue_size = BACKLOG

    def __init__(self, address: tuple[str, int], owner: VoteServer) -> None:
        self.owner = owner
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                send_message(request, error_answer("busy", f"over {MAX_CONNECTIONS} connections"))
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        server: _TCPServer = self.server  # type: ignore[assignment]
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            message = recv_message(sock, MAX_MESSAGE_BYTES, READ_TIMEOUT_S)
        except TooLargeError as exc:
            answer = error_answer("too_large", str(exc))
        except (OSError, ValueError) as exc:  # timeouts, resets, bad UTF-8 / JSON
            answer = error_answer("malformed", f"cannot read the vote message: {exc}")
        else:
            answer = server.owner.submit(message)
        with contextlib.suppress(OSError):  # the task may be gone (killed); nothing to do
            sock.settimeout(READ_TIMEOUT_S)
            send_message(sock, answer)


class VoteServer:
    """Driver-side vote server (see the module docstring for the protocol).

    Contract: :meth:`start` before :meth:`open_round`; :meth:`close` is idempotent and also
    runs at interpreter exit. Thread-safe.
    """

    def __init__(
        self,
        bind_host: str,
        advertise_host: str | None = None,
        *,
        gather_timeout_s: float = GATHER_TIMEOUT_S,
    ) -> None:
        self._bind_host = bind_host
        self._advertise_host = advertise_host or bind_host
        self._gather_timeout_s = gather_timeout_s
        self._cond = threading.Condition()
        self._rounds: dict[RoundKey, Round] = {}
        self._claims: dict[RoundKey, Claims] = {}
        self._server: _TCPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` the tasks connect to."""
        if self._server is None:
            msg = "the vote server is not running; call start() first"
            raise StageError(msg, code=StageCode.VOTE_CHANNEL)
        return self._advertise_host, int(self._server.server_address[1])

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`close`."""
        return self._server is not None

    def start(self) -> VoteServer:
        """Bind an ephemeral port on the bind host and serve in a daemon thread."""
        if self._server is not None:
            return self
        try:
            server = _TCPServer((self._bind_host, 0), self)
        except OSError as exc:
            msg = (
                f"cannot start the vote server on {self._bind_host!r} ({exc}); check "
                "spark.driver.bindAddress / spark.driver.host or use vote_channel='barrier'"
            )
            raise StageError(msg, code=StageCode.VOTE_CHANNEL) from exc
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            args=(SHUTDOWN_POLL_S,),
            name="kafka-sink-votes",
            daemon=True,
        )
        self._thread.start()
        atexit.register(self.close)
        log.info("vote server listening on %s:%d", *self.address)
        return self

    def close(self) -> None:
        """Stop serving; waiting tasks are answered with an error. Idempotent."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._server = self._thread = None
        with self._cond:
            for rnd in self._rounds.values():
                rnd.broken = rnd.broken or error_answer(
                    "closed", "the driver's vote server stopped"
                )
            self._rounds.clear()
            self._cond.notify_all()
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(STOP_TIMEOUT_S)
        atexit.unregister(self.close)

    def open_round(self, plan: EpochPlan, stage_run: int) -> VoteTicket:
        """Open the round of ``plan``'s write stage run ``stage_run``.

        An open round of an older stage run of the same epoch and plan attempt is
        closed (its waiting tasks get an error; its late votes are rejected).

        Raises:
            StageCode.VOTE_CHANNEL: not running, or ``stage_run`` is not newer than the open one.

        """
        ticket = self._ticket(plan, stage_run)
        key = (plan.sink_id, plan.epoch, plan.attempt)
        with self._cond:
            old = self._rounds.get(key)
            if old is not None and old.ticket.stage_run >= stage_run:
                msg = (
                    f"round {key} stage run {stage_run} is not newer than the open "
                    f"stage run {old.ticket.stage_run}"
                )
                raise StageError(msg, code=StageCode.VOTE_CHANNEL)
            if old is not None:
                old.broken = error_answer("rejected", f"superseded by stage run {stage_run}")
                self._cond.notify_all()
            self._rounds[key] = Round(ticket=ticket)
        return ticket

    def close_round(self, ticket: VoteTicket) -> None:
        """Close ``ticket``'s round (no-op if already closed or superseded)."""
        key = (ticket.sink_id, ticket.epoch, ticket.plan_attempt)
        with self._cond:
            rnd = self._rounds.get(key)
            if rnd is not None and rnd.ticket is ticket:
                del self._rounds[key]
                if rnd.result is None:
                    rnd.broken = rnd.broken or error_answer(
                        "closed", "the round was closed: the write stage ended without all votes"
                    )
                self._cond.notify_all()

    @contextlib.contextmanager
    def voting(self, plan: EpochPlan, stage_run: int) -> Iterator[VoteTicket]:
        """Open a round for the duration of the ``with`` block (the Spark job)."""
        ticket = self.open_round(plan, stage_run)
        try:
            yield ticket
        finally:
            self.close_round(ticket)

    def open_claims(self, plan: EpochPlan) -> VoteTicket:
        """Open the at-most-once claims of ``plan`` (one per plan: no stage is re-run)."""
        ticket = self._ticket(plan, 0)
        with self._cond:
            self._claims[(plan.sink_id, plan.epoch, plan.attempt)] = Claims(ticket)
        return ticket

    def _ticket(self, plan: EpochPlan, stage_run: int) -> VoteTicket:
        """Return a ticket to this server for ``plan``'s tasks, with a fresh secret token."""
        host, port = self.address
        return VoteTicket(
            host=host,
            port=port,
            sink_id=plan.sink_id,
            epoch=plan.epoch,
            plan_attempt=plan.attempt,
            stage_run=stage_run,
            parallelism=plan.parallelism,
            token=secrets.token_hex(16),
        )

    @contextlib.contextmanager
    def claiming(self, plan: EpochPlan) -> Iterator[VoteTicket]:
        """Open the claims of ``plan`` for the duration of the ``with`` block (the Spark job)."""
        ticket = self.open_claims(plan)
        try:
            yield ticket
        finally:
            with self._cond:
                self._claims.pop((plan.sink_id, plan.epoch, plan.attempt), None)

    def _claim(self, message: Any) -> dict[str, Any]:
        try:
            key, _, token, _ = _parse_request({**message, "vote": _CLAIM_VOTE})
            partition, attempt_id = message["partition"], message["attempt_id"]
            if not (isinstance(partition, int) and isinstance(attempt_id, int)):
                msg = "partition and attempt_id must be integers"
                raise TypeError(msg)
        except (ValueError, KeyError, TypeError) as exc:
            return error_answer("malformed", f"bad claim message: {exc}")
        with self._cond:
            claims = self._claims.get(key)
            if claims is None:
                return error_answer("rejected", f"no open claims for {key}")
            if not secrets.compare_digest(token.encode(), claims.ticket.token.encode()):
                return error_answer("rejected", "wrong claims token")
            return claims.claim(partition, attempt_id)

    def submit(self, message: Any) -> dict[str, Any]:
        """Handle one task's vote message; block until the round decides (handler thread)."""
        if isinstance(message, dict) and message.get("op") == "claim":
            return self._claim(message)
        try:
            key, stage_run, token, vote = _parse_request(message)
        except (ValueError, KeyError, TypeError) as exc:
            return error_answer("malformed", f"bad vote message: {exc}")
        with self._cond:
            rnd = self._rounds.get(key)
            refusal = _admit(rnd, key, stage_run, token)
            if refusal is not None or rnd is None:
                return refusal or error_answer("rejected", "no open round")
            refusal = rnd.add(vote)
            if refusal is not None:
                return refusal
            self._cond.notify_all()
            return self._await(rnd)

    def _await(self, rnd: Round) -> dict[str, Any]:
        """Wait (holding the condition) until ``rnd`` has all votes, breaks or times out."""
        deadline = time.monotonic() + self._gather_timeout_s
        while True:
            if rnd.result is not None:
                return {"ok": True, "votes": rnd.result}
            if rnd.broken is not None:
                return rnd.broken
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                t = rnd.ticket
                rnd.broken = error_answer(
                    "timeout",
                    f"epoch {t.epoch}: only {len(rnd.votes)} of {t.parallelism} "
                    f"votes arrived within {self._gather_timeout_s:.0f}s",
                )
                self._cond.notify_all()
                return rnd.broken
            self._cond.wait(remaining)


# A placeholder vote: claims share the request fields of votes but carry no vote.
_CLAIM_VOTE = {"epoch": 0, "partition": 0, "kind": "yes", "rows": 0, "checksum": "", "error": None}


def _parse_request(message: Any) -> tuple[RoundKey, int, str, Vote]:
    if not isinstance(message, dict) or message.get("v") != PROTOCOL_VERSION:
        msg = f"expected a protocol version {PROTOCOL_VERSION} object"
        raise ValueError(msg)
    sink_id, epoch, attempt = message["sink_id"], message["epoch"], message["plan_attempt"]
    stage_run, token = message["stage_run"], message["token"]
    if not (
        isinstance(sink_id, str)
        and isinstance(token, str)
        and all(isinstance(i, int) for i in (epoch, attempt, stage_run))
    ):
        msg = "sink_id and token must be strings; epoch and attempts integers"
        raise ValueError(msg)
    return (sink_id, epoch, attempt), stage_run, token, vote_from_doc(message["vote"])


def _admit(rnd: Round | None, key: RoundKey, stage_run: int, token: str) -> dict[str, Any] | None:
    """Return an error answer unless the message belongs to the open round ``rnd``."""
    if rnd is None:
        return error_answer("rejected", f"no open vote round for {key}")
    if stage_run < rnd.ticket.stage_run:
        return error_answer(
            "rejected",
            f"stage run {stage_run} is older than the open stage run {rnd.ticket.stage_run}",
        )
    if stage_run != rnd.ticket.stage_run:
        return error_answer("rejected", f"no open round for stage run {stage_run}")
    if not secrets.compare_digest(token.encode(), rnd.ticket.token.encode()):
        return error_answer("rejected", "wrong round token")
    return None
