"""Unit tests of the client-reuse rules (connectors/stage/_reuse.py), the one owner of them."""

import pickle

from connectors.stage import ReusePolicy, ReuseTicket
from txn import EpochPlan, Marker

M3 = Marker(3, 10, "c")


def plan(attempt: int = 0, parallelism: int = 2) -> EpochPlan:
    return EpochPlan("s", 4, parallelism, "f", attempt=attempt)


def test_only_the_first_attempt_of_the_first_run_reuses():
    policy = ReusePolicy()
    assert policy.ticket(plan(), 0).may_reuse(0)
    assert not policy.ticket(plan(), 0).may_reuse(1)  # Spark task retry
    assert not policy.ticket(plan(), 1).may_reuse(0)  # the sink's stage re-run
    assert not policy.ticket(plan(attempt=1), 0).may_reuse(0)  # in-doubt redo


def test_decision_needs_same_generation_and_unchanged_marker():
    ticket = ReuseTicket("g1")
    reads: list[int] = []

    def read() -> Marker:
        reads.append(1)
        return M3

    assert ticket.decide(0, "g1", M3, read).reuse
    assert ticket.decide(0, "g1", M3, read).marker == M3
    other = ticket.decide(0, "g1", Marker(4, 1, "d"), read)  # someone else committed since
    assert not other.reuse and other.marker == M3 and other.marker_read
    reads.clear()
    for decision in (
        ticket.decide(0, "g0", M3, read),  # pooled under an older generation
        ticket.decide(0, None, None, read),  # nothing pooled
        ticket.decide(1, "g1", M3, read),
    ):  # a retry
        assert not decision.reuse and not decision.marker_read
    assert reads == [], "the marker is read only when it decides"


def test_policy_renews_on_events_and_on_a_parallelism_change():
    policy = ReusePolicy()
    first = policy.ticket(plan(parallelism=2), 0).generation
    assert policy.ticket(plan(parallelism=2), 0).generation == first
    policy.renew("a failed epoch")
    second = policy.ticket(plan(parallelism=2), 0).generation
    assert second != first
    assert policy.ticket(plan(parallelism=3), 0).generation != second


def test_ticket_pickles():
    ticket = ReuseTicket("g", 1, 2)
    assert pickle.loads(pickle.dumps(ticket)) == ticket
