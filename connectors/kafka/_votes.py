"""The driver vote channel of the aligned exactly-once sink: a small TCP vote server.

Why: Spark's ``BarrierTaskContext.allGather`` polls its RPC answer once per second in the
JVM, so every aligned epoch paid about one second. Here the write tasks of an epoch send
their votes to a server on the driver and are answered the moment the last vote arrives.
The barrier stage itself stays (gang scheduling; one failed task kills the others); only
the gathering moves here.

Protocol of one round (one run of the write stage of one epoch):

1. the driver calls :meth:`VoteServer.open_round` before the Spark job starts; it returns a
   :class:`VoteTicket` (address, round key, ``parallelism`` P and a fresh random token),
   which travels to the tasks inside the pickled task spec;
2. each task connects, sends one message: a 4-byte big-endian length, then compact JSON
   ``{"v", "sink_id", "epoch", "plan_attempt", "stage_attempt", "token", "vote"}``
   (JSON only: nothing received is ever unpickled), and waits for the answer;
3. the server checks the message (size, round, stage attempt, token, epoch, partition in
   ``0..P-1``, one vote per partition; a re-sent vote of the same partition is accepted
   only if identical) and answers an error at once when a check fails;
4. when all P votes are in, every waiting task is answered with the same full list of
   votes (sorted by partition), so every task reaches the same commit decision;
5. a task that waited :data:`txn.GATHER_TIMEOUT_S` breaks the round: it and every other
   task of the round get a timeout answer (:class:`VoteTimeoutError` in the task), and the
   tasks abort. A partial set of votes is never answered;
6. the driver closes the round when the job ends (waiting tasks get an error answer).

The round key is ``(sink_id, epoch, plan attempt, stage attempt)``. The stage attempt is
the sink's attempt at running the write stage within one call (``stage_retries``): that is
what re-runs a barrier result stage, since Spark aborts the job instead of retrying one
(and PySpark does not expose the JVM's stage attempt number to Python tasks). Opening a
later stage attempt closes the older round; its late votes are rejected.

Not guaranteed: tasks that die after the last vote arrived may miss the answer; the
others commit, and the redo of the epoch redoes the dead task's partition by marker.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import secrets
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from connectors.kafka._errors import VoteChannelError, VoteRejectedError, VoteTimeoutError
from txn import GATHER_TIMEOUT_S, EpochPlan, Vote, VoteKind

log = logging.getLogger("connectors.kafka.votes")

PROTOCOL_VERSION = 1
# Largest request accepted, in bytes; a vote is well below it since its error text is
# cut to MAX_ERROR_CHARS.
MAX_MESSAGE_BYTES = 16 * 1024
# Characters of a NO vote's error text that are sent (the task raises the full error).
MAX_ERROR_CHARS = 2_000
# Pending-connection backlog of the listening socket: one connection per write task.
BACKLOG = 128
# Connections served at once; beyond it a connection is answered "busy" and closed.
MAX_CONNECTIONS = 1_024
# Seconds a connected task may take to send its small vote message (bounds idle peers).
READ_TIMEOUT_S = 30.0
# Seconds for a task's TCP connect to the driver (a busy driver accepts late).
CONNECT_TIMEOUT_S = 30.0
# Seconds a task waits for the answer beyond GATHER_TIMEOUT_S, so that the server's own
# timeout answer arrives first and the whole round breaks together.
REPLY_MARGIN_S = 15.0
# Seconds between the serving thread's checks for shutdown (only delays close()).
SHUTDOWN_POLL_S = 0.5
# Seconds close() waits for the serving thread to stop.
STOP_TIMEOUT_S = 5.0
_HEADER = struct.Struct(">I")


@dataclass(frozen=True)
class VoteTicket:
    """What a write task needs to vote in one round (picklable; travels in the task spec)."""

    host: str
    port: int
    sink_id: str
    epoch: int
    plan_attempt: int
    stage_attempt: int
    parallelism: int
    token: str = field(repr=False)


def vote_to_doc(vote: Vote) -> dict[str, Any]:
    """Return ``vote`` as a JSON-ready dict (error text cut to :data:`MAX_ERROR_CHARS`)."""
    error = vote.error if vote.error is None else vote.error[:MAX_ERROR_CHARS]
    return {"epoch": vote.epoch, "partition": vote.partition, "kind": vote.kind.value,
            "rows": vote.rows, "checksum": vote.checksum, "error": error}


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
    return Vote(doc["epoch"], doc["partition"], VoteKind(doc.get("kind")), doc["rows"],
                doc["checksum"], error)


def _canonical(vote: Vote) -> str:
    return json.dumps(vote_to_doc(vote), sort_keys=True, separators=(",", ":"))


# -- framing ----------------------------------------------------------------------------
class _TooLargeError(Exception):
    """A peer announced a message over the size limit."""


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        chunk = sock.recv(min(n, 65536))
        if not chunk:
            msg = "the peer closed the connection mid-message"
            raise ConnectionError(msg)
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv_message(sock: socket.socket, limit: int, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline))
    if size > limit:
        msg = f"message of {size} bytes exceeds the limit of {limit} bytes"
        raise _TooLargeError(msg)
    return json.loads(_recv_exact(sock, size, deadline).decode("utf-8"))


def _send_message(sock: socket.socket, doc: Any) -> None:
    payload = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _error(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "code": code, "error": message}


# -- server -----------------------------------------------------------------------------
_RoundKey = tuple[str, int, int]  # (sink_id, epoch, plan attempt)


@dataclass
class _Round:
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
            return _error("rejected", f"vote for epoch {vote.epoch} in a round of epoch {t.epoch}")
        if not 0 <= vote.partition < t.parallelism:
            return _error("rejected", f"partition {vote.partition} is outside 0..{t.parallelism - 1}")
        canonical = _canonical(vote)
        known = self.votes.get(vote.partition)
        if known is not None and known[1] != canonical:
            return _error("rejected", f"partition {vote.partition} already voted differently in "
                                      "this stage attempt")
        self.votes[vote.partition] = (vote, canonical)
        if self.result is None and len(self.votes) == t.parallelism:
            self.result = [vote_to_doc(self.votes[p][0]) for p in range(t.parallelism)]
        return None


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
                _send_message(request, _error("busy", f"over {MAX_CONNECTIONS} connections"))
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
            message = _recv_message(sock, MAX_MESSAGE_BYTES, READ_TIMEOUT_S)
        except _TooLargeError as exc:
            answer = _error("too_large", str(exc))
        except (OSError, ValueError) as exc:  # timeouts, resets, bad UTF-8 / JSON
            answer = _error("malformed", f"cannot read the vote message: {exc}")
        else:
            answer = server.owner.submit(message)
        with contextlib.suppress(OSError):  # the task may be gone (killed); nothing to do
            sock.settimeout(READ_TIMEOUT_S)
            _send_message(sock, answer)


class VoteServer:
    """Driver-side vote server (see the module docstring for the protocol).

    Contract: :meth:`start` before :meth:`open_round`; :meth:`close` is idempotent and also
    runs at interpreter exit. Thread-safe.
    """

    def __init__(self, bind_host: str, advertise_host: str | None = None, *,
                 gather_timeout_s: float = GATHER_TIMEOUT_S) -> None:
        self._bind_host = bind_host
        self._advertise_host = advertise_host or bind_host
        self._gather_timeout_s = gather_timeout_s
        self._cond = threading.Condition()
        self._rounds: dict[_RoundKey, _Round] = {}
        self._server: _TCPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` the tasks connect to."""
        if self._server is None:
            msg = "the vote server is not running; call start() first"
            raise VoteChannelError(msg)
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
            msg = (f"cannot start the vote server on {self._bind_host!r} ({exc}); check "
                   "spark.driver.bindAddress / spark.driver.host or use vote_channel='barrier'")
            raise VoteChannelError(msg) from exc
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_S,),
                                        name="kafka-sink-votes", daemon=True)
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
                rnd.broken = rnd.broken or _error("closed", "the driver's vote server stopped")
            self._rounds.clear()
            self._cond.notify_all()
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(STOP_TIMEOUT_S)
        atexit.unregister(self.close)

    def open_round(self, plan: EpochPlan, stage_attempt: int) -> VoteTicket:
        """Open the round of ``plan``'s write stage attempt ``stage_attempt``.

        An open round of an older stage attempt of the same epoch and plan attempt is
        closed (its waiting tasks get an error; its late votes are rejected).

        Raises:
            VoteChannelError: not running, or ``stage_attempt`` is not newer than the open one.

        """
        host, port = self.address
        ticket = VoteTicket(host, port, plan.sink_id, plan.epoch, plan.attempt, stage_attempt,
                            plan.parallelism, secrets.token_hex(16))
        key = (plan.sink_id, plan.epoch, plan.attempt)
        with self._cond:
            old = self._rounds.get(key)
            if old is not None and old.ticket.stage_attempt >= stage_attempt:
                msg = (f"round {key} stage attempt {stage_attempt} is not newer than the open "
                       f"stage attempt {old.ticket.stage_attempt}")
                raise VoteChannelError(msg)
            if old is not None:
                old.broken = _error("rejected", f"superseded by stage attempt {stage_attempt}")
                self._cond.notify_all()
            self._rounds[key] = _Round(ticket)
        return ticket

    def close_round(self, ticket: VoteTicket) -> None:
        """Close ``ticket``'s round (no-op if already closed or superseded)."""
        key = (ticket.sink_id, ticket.epoch, ticket.plan_attempt)
        with self._cond:
            rnd = self._rounds.get(key)
            if rnd is not None and rnd.ticket is ticket:
                del self._rounds[key]
                if rnd.result is None:
                    rnd.broken = rnd.broken or _error("closed", "the round was closed: the "
                                                      "write stage ended without all votes")
                self._cond.notify_all()

    @contextlib.contextmanager
    def voting(self, plan: EpochPlan, stage_attempt: int) -> Iterator[VoteTicket]:
        """Open a round for the duration of the ``with`` block (the Spark job)."""
        ticket = self.open_round(plan, stage_attempt)
        try:
            yield ticket
        finally:
            self.close_round(ticket)

    def submit(self, message: Any) -> dict[str, Any]:
        """Handle one task's vote message; block until the round decides (handler thread)."""
        try:
            key, stage_attempt, token, vote = _parse_request(message)
        except (ValueError, KeyError, TypeError) as exc:
            return _error("malformed", f"bad vote message: {exc}")
        with self._cond:
            rnd = self._rounds.get(key)
            refusal = _admit(rnd, key, stage_attempt, token)
            if refusal is not None or rnd is None:
                return refusal or _error("rejected", "no open round")
            refusal = rnd.add(vote)
            if refusal is not None:
                return refusal
            self._cond.notify_all()
            return self._await(rnd)

    def _await(self, rnd: _Round) -> dict[str, Any]:
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
                rnd.broken = _error(
                    "timeout", f"epoch {t.epoch}: only {len(rnd.votes)} of {t.parallelism} "
                    f"votes arrived within {self._gather_timeout_s:.0f}s")
                self._cond.notify_all()
                return rnd.broken
            self._cond.wait(remaining)


def _parse_request(message: Any) -> tuple[_RoundKey, int, str, Vote]:
    if not isinstance(message, dict) or message.get("v") != PROTOCOL_VERSION:
        msg = f"expected a protocol version {PROTOCOL_VERSION} object"
        raise ValueError(msg)
    sink_id, epoch, attempt = message["sink_id"], message["epoch"], message["plan_attempt"]
    stage_attempt, token = message["stage_attempt"], message["token"]
    if not (isinstance(sink_id, str) and isinstance(token, str)
            and all(isinstance(i, int) for i in (epoch, attempt, stage_attempt))):
        msg = "sink_id and token must be strings; epoch and attempts integers"
        raise ValueError(msg)
    return (sink_id, epoch, attempt), stage_attempt, token, vote_from_doc(message["vote"])


def _admit(rnd: _Round | None, key: _RoundKey, stage_attempt: int,
           token: str) -> dict[str, Any] | None:
    """Return an error answer unless the message belongs to the open round ``rnd``."""
    if rnd is None:
        return _error("rejected", f"no open vote round for {key}")
    if stage_attempt < rnd.ticket.stage_attempt:
        return _error("rejected", f"stage attempt {stage_attempt} is older than the open "
                                  f"stage attempt {rnd.ticket.stage_attempt}")
    if stage_attempt != rnd.ticket.stage_attempt:
        return _error("rejected", f"no open round for stage attempt {stage_attempt}")
    if not secrets.compare_digest(token.encode(), rnd.ticket.token.encode()):
        return _error("rejected", "wrong round token")
    return None


# -- task side --------------------------------------------------------------------------
def gather_votes(ticket: VoteTicket, vote: Vote, *,
                 reply_timeout_s: float = GATHER_TIMEOUT_S + REPLY_MARGIN_S) -> list[Vote]:
    """Send ``vote`` to the driver and return every partition's vote (run in the task).

    Raises:
        VoteTimeoutError: the round did not complete in time (the caller must abort).
        VoteRejectedError: the server refused the vote (wrong token, stale round, ...).
        VoteChannelError: the driver cannot be reached or answered garbage.

    """
    request = {"v": PROTOCOL_VERSION, "sink_id": ticket.sink_id, "epoch": ticket.epoch,
               "plan_attempt": ticket.plan_attempt, "stage_attempt": ticket.stage_attempt,
               "token": ticket.token, "vote": vote_to_doc(vote)}
    where = f"{ticket.host}:{ticket.port}"
    try:
        sock = socket.create_connection((ticket.host, ticket.port), timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        msg = (f"cannot reach the driver's vote server at {where} ({exc}); executors must be "
               "able to connect to the driver, otherwise use vote_channel='barrier'")
        raise VoteChannelError(msg) from exc
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            _send_message(sock, request)
            answer = _recv_message(sock, MAX_MESSAGE_BYTES * (ticket.parallelism + 1),
                                   reply_timeout_s)
        except TimeoutError as exc:
            msg = f"no answer from the vote server at {where} within {reply_timeout_s:.0f}s"
            raise VoteTimeoutError(msg) from exc
        except (OSError, ValueError, _TooLargeError) as exc:
            msg = f"vote exchange with {where} failed: {exc}"
            raise VoteChannelError(msg) from exc
    return _parse_answer(answer, where)


def _parse_answer(answer: Any, where: str) -> list[Vote]:
    if not isinstance(answer, dict):
        msg = f"the vote server at {where} answered a non-object"
        raise VoteChannelError(msg)
    if answer.get("ok") is True:
        raw = answer.get("votes")
        if not isinstance(raw, list):
            msg = f"the vote server at {where} answered without a vote list"
            raise VoteChannelError(msg)
        try:
            return [vote_from_doc(doc) for doc in raw]
        except ValueError as exc:
            msg = f"the vote server at {where} answered a malformed vote: {exc}"
            raise VoteChannelError(msg) from exc
    text = f"vote server at {where}: {answer.get('error')}"
    if answer.get("code") == "timeout":
        raise VoteTimeoutError(text)
    raise VoteRejectedError(text)


def server_hosts(master: str, conf_get: Any) -> tuple[str, str]:
    """Return ``(bind host, advertised host)`` for the vote server of a SparkContext.

    Local masters (``local``, ``local[n]``, ``local-cluster[...]``): loopback. Otherwise
    ``spark.driver.bindAddress`` (falling back to ``spark.driver.host``) to bind and
    ``spark.driver.host`` to advertise, the address Spark's executors already use.
    ``conf_get(key)`` returns a setting or None (``SparkConf.get``).

    Raises:
        VoteChannelError: a cluster master without ``spark.driver.host``.

    """
    if master.startswith("local"):
        return "127.0.0.1", "127.0.0.1"
    host = conf_get("spark.driver.host")
    if not host:
        msg = ("spark.driver.host is not set, so the vote server does not know the driver's "
               "address; set it or use vote_channel='barrier'")
        raise VoteChannelError(msg)
    return str(conf_get("spark.driver.bindAddress") or host), str(host)
