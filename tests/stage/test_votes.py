from connectors.stage._errors import VOTE_CODES
from txn import has_code

"""Unit tests of the driver vote server (connectors/stage/_votes): threads play the tasks."""

import json
import pickle
import socket
import struct
import threading
from dataclasses import replace

import pytest

from connectors.stage import StageCode, StageError
from connectors.stage._votes import VoteServer, VoteTicket, gather_votes, server_hosts
from connectors.stage._votes import _server as votes_server
from connectors.stage._votes._codec import MAX_ERROR_CHARS
from connectors.stage._votes._framing import MAX_MESSAGE_BYTES
from txn import EpochPlan, Vote
from txn._model import VoteKind

# Seconds a test waits for a task thread to finish (generous: the machine is shared).
JOIN_TIMEOUT_S = 60.0


@pytest.fixture
def server():
    srv = VoteServer("127.0.0.1").start()
    yield srv
    srv.close()


def plan(parallelism=3, epoch=7, attempt=0):
    return EpochPlan(
        sink_id="sink-a", epoch=epoch, parallelism=parallelism, fingerprint="fp", attempt=attempt
    )


def yes(p, epoch=7):
    return Vote(epoch=epoch, partition=p, kind=VoteKind.YES, rows=10 + p, checksum=f"u{p}")


class Task(threading.Thread):
    """One write task voting through the server; keeps its answer or its error."""

    def __init__(self, ticket, vote):
        super().__init__(daemon=True)
        self.ticket, self.vote = ticket, vote
        self.votes = None
        self.error = None

    def run(self):
        try:
            self.votes = gather_votes(self.ticket, self.vote)
        except Exception as exc:  # noqa: BLE001 - inspected by the test
            self.error = exc

    def result(self):
        self.join(JOIN_TIMEOUT_S)
        assert not self.is_alive(), "the task never got an answer"
        return self


def run_tasks(ticket, votes):
    tasks = [Task(ticket, v) for v in votes]
    for t in tasks:
        t.start()
    return [t.result() for t in tasks]


def wait_for_votes(server, ticket, n):
    """Block until the server holds ``n`` votes of ``ticket``'s round (no sleeps in asserts)."""
    key = (ticket.sink_id, ticket.epoch, ticket.plan_attempt)
    with server._cond:
        assert server._cond.wait_for(
            lambda: key in server._rounds and len(server._rounds[key].votes) >= n,
            JOIN_TIMEOUT_S,
        )


def test_all_votes_in_everyone_gets_the_same_full_list(server):
    ticket = server.open_round(plan(3), 0)
    votes = [
        yes(2),
        Vote(epoch=7, partition=0, kind=VoteKind.ALREADY_COMMITTED, rows=5, checksum="u0"),
        Vote(epoch=7, partition=1, kind=VoteKind.NO, rows=0, checksum="", error="boom"),
    ]
    tasks = run_tasks(ticket, votes)
    assert [t.error for t in tasks] == [None, None, None]
    expected = sorted(votes, key=lambda v: v.partition)
    assert all(t.votes == expected for t in tasks)


def test_wrong_token_is_rejected_and_not_counted(server):
    ticket = server.open_round(plan(2), 0)
    forged = Task(replace(ticket, token="0" * 32), yes(0))
    forged.start()
    assert has_code(forged.result().error, StageCode.VOTE_REJECTED)
    assert "token" in str(forged.error)
    tasks = run_tasks(ticket, [yes(0), yes(1)])
    assert all(t.error is None and t.votes == [yes(0), yes(1)] for t in tasks)


def test_timeout_breaks_the_round_with_a_typed_error():
    srv = VoteServer("127.0.0.1", gather_timeout_s=0.5).start()
    try:
        ticket = srv.open_round(plan(2), 0)
        lonely = Task(ticket, yes(0))
        lonely.start()
        assert has_code(lonely.result().error, StageCode.VOTE_TIMEOUT)
        # A vote arriving after the break never completes the round: no partial decision.
        late = Task(ticket, yes(1))
        late.start()
        assert has_code(late.result().error, StageCode.VOTE_TIMEOUT)
        assert late.votes is None
    finally:
        srv.close()


def test_client_side_timeout_is_the_same_typed_error(server):
    ticket = server.open_round(plan(2), 0)
    with pytest.raises(
        StageError, match="no answer", check=lambda e: e.code is StageCode.VOTE_TIMEOUT
    ):
        gather_votes(ticket, yes(0), reply_timeout_s=0.3)


def test_newer_stage_run_replaces_the_round_and_rejects_the_older(server):
    p = plan(2)
    first = server.open_round(p, 0)
    waiting = Task(first, yes(0))
    waiting.start()
    wait_for_votes(server, first, 1)
    second = server.open_round(p, 1)
    assert has_code(waiting.result().error, *VOTE_CODES)
    assert "superseded" in str(waiting.error)
    stale = Task(first, yes(1))
    stale.start()
    assert has_code(stale.result().error, StageCode.VOTE_REJECTED)
    assert "older" in str(stale.error)
    assert first.token != second.token
    tasks = run_tasks(second, [yes(0), yes(1)])
    assert all(t.votes == [yes(0), yes(1)] for t in tasks)
    with pytest.raises(
        StageError, match="not newer", check=lambda e: e.code is StageCode.VOTE_CHANNEL
    ):
        server.open_round(p, 1)


def test_identical_revote_is_accepted_and_a_different_one_rejected(server):
    ticket = server.open_round(plan(2), 0)
    first = Task(ticket, yes(0))
    first.start()
    wait_for_votes(server, ticket, 1)
    conflicting = Task(
        ticket, Vote(epoch=7, partition=0, kind=VoteKind.NO, rows=0, checksum="", error="other")
    )
    conflicting.start()
    assert has_code(conflicting.result().error, StageCode.VOTE_REJECTED)
    assert "already voted" in str(conflicting.error)
    retried = Task(ticket, yes(0))  # a re-connecting retry of the same task
    retried.start()
    wait_for_votes(server, ticket, 1)
    other = Task(ticket, yes(1))
    other.start()
    for t in (first, retried, other):
        assert t.result().error is None and t.votes == [yes(0), yes(1)]


@pytest.mark.parametrize(
    ("vote", "needle"),
    [(yes(2), "outside 0..1"), (yes(0, epoch=8), "epoch 8")],
)
def test_votes_outside_the_round_are_rejected(server, vote, needle):
    ticket = server.open_round(plan(2), 0)
    with pytest.raises(StageError, match=needle, check=lambda e: e.code is StageCode.VOTE_REJECTED):
        gather_votes(ticket, vote)


def raw_exchange(address, data):
    with socket.create_connection(address, timeout=JOIN_TIMEOUT_S) as sock:
        sock.sendall(data)
        sock.settimeout(JOIN_TIMEOUT_S)
        (size,) = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))
        return json.loads(sock.recv(size, socket.MSG_WAITALL))


def test_oversize_message_is_refused_without_reading_it(server):
    server.open_round(plan(2), 0)
    answer = raw_exchange(server.address, struct.pack(">I", MAX_MESSAGE_BYTES + 1) + b"{")
    assert answer["ok"] is False and answer["code"] == "too_large"


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"v": 1}',
        b"[1, 2]",
        b'{"v": 99}',
        json.dumps(
            {
                "v": 1,
                "sink_id": "sink-a",
                "epoch": 7,
                "plan_attempt": 0,
                "stage_run": 0,
                "token": "x",
                "vote": {"epoch": "7"},
            }
        ).encode(),
    ],
)
def test_malformed_messages_get_an_error_answer(server, body):
    server.open_round(plan(2), 0)
    answer = raw_exchange(server.address, struct.pack(">I", len(body)) + body)
    assert answer["ok"] is False and answer["code"] == "malformed"


def test_long_error_text_is_cut_to_fit_the_message_limit(server):
    ticket = server.open_round(plan(1), 0)
    vote = Vote(
        epoch=7,
        partition=0,
        kind=VoteKind.NO,
        rows=0,
        checksum="",
        error="x" * (MAX_MESSAGE_BYTES * 2),
    )
    (got,) = gather_votes(ticket, vote)
    assert got.kind is VoteKind.NO and got.error == "x" * MAX_ERROR_CHARS


def test_closing_the_round_or_the_server_answers_waiting_tasks(server):
    ticket = server.open_round(plan(2), 0)
    waiting = Task(ticket, yes(0))
    waiting.start()
    wait_for_votes(server, ticket, 1)
    server.close_round(ticket)
    assert has_code(waiting.result().error, *VOTE_CODES)
    again = server.open_round(plan(2, epoch=8), 0)
    waiting = Task(again, yes(0, epoch=8))
    waiting.start()
    wait_for_votes(server, again, 1)
    server.close()
    assert has_code(waiting.result().error, *VOTE_CODES)
    assert not server.running


def test_unreachable_server_is_a_channel_error_naming_the_fallback():
    srv = VoteServer("127.0.0.1").start()
    ticket = srv.open_round(plan(1), 0)
    srv.close()
    with pytest.raises(
        StageError, match="vote_channel='barrier'", check=lambda e: e.code is StageCode.VOTE_CHANNEL
    ):
        gather_votes(ticket, yes(0))


def test_connections_beyond_the_limit_are_answered_busy(monkeypatch):
    monkeypatch.setattr(votes_server, "MAX_CONNECTIONS", 1)
    srv = VoteServer("127.0.0.1").start()
    try:
        ticket = srv.open_round(plan(2), 0)
        holder = Task(ticket, yes(0))
        holder.start()
        wait_for_votes(srv, ticket, 1)
        with pytest.raises(
            StageError, match="connections", check=lambda e: e.code is StageCode.VOTE_REJECTED
        ):
            gather_votes(ticket, yes(1))
    finally:
        srv.close()
    assert has_code(holder.result().error, *VOTE_CODES)


def test_ticket_pickle_round_trip_and_token_hidden_from_repr(server):
    ticket = server.open_round(plan(2), 0)
    assert pickle.loads(pickle.dumps(ticket)) == ticket
    assert ticket.token not in repr(ticket)
    assert len(ticket.token) == 32 and isinstance(ticket, VoteTicket)


def test_server_hosts_follow_spark_conf():
    conf = {"spark.driver.host": "10.0.0.5", "spark.driver.bindAddress": "0.0.0.0"}
    assert server_hosts("local[2]", conf.get) == ("127.0.0.1", "127.0.0.1")
    assert server_hosts("spark://m:7077", conf.get) == ("0.0.0.0", "10.0.0.5")
    assert server_hosts("yarn", {"spark.driver.host": "d1"}.get) == ("d1", "d1")
    with pytest.raises(
        StageError, match="spark.driver.host", check=lambda e: e.code is StageCode.VOTE_CHANNEL
    ):
        server_hosts("yarn", {}.get)
