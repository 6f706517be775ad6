"""Unit tests of the pooled strategy's reuse rules (connectors/kafka/_sink/_reuse.py).

Each rule is a predicate of ``_reuse`` (``_reuse.RULES``); each has a test here named
``test_<predicate>...`` that fails when the predicate is weakened (one condition dropped
or one field not compared), and :meth:`ReuseTicket.decide` and :class:`ReusePolicy` are
tested through them.
"""

import inspect
import logging
import pickle
import sys

import pytest

from connectors.kafka._sink import _reuse
from connectors.kafka._sink._reuse import (
    ProducerNote,
    ReusePolicy,
    ReuseTicket,
    ended_cleanly,
    fresh_open_on_own_lane,
    known_instance,
    marker_unchanged,
    may_prepare,
    may_prepare_lane,
    newer_instance_kept,
    partition_seen,
    pooled_in_generation,
    prepared_order_known,
    recorded_run,
    steady_attempt,
)
from connectors.stage import StageEvent
from connectors.stage._backchannel import StageRun
from connectors.stage._states import ParticipantState
from txn import CommitMode, EpochPlan, Guarantee, Marker, PartitionReport
from txn._model import PartitionOutcome

M3 = Marker(3, 10, "c")


def plan(
    attempt: int = 0, parallelism: int = 2, mode: CommitMode = CommitMode.ALIGNED
) -> EpochPlan:
    return EpochPlan(
        sink_id="s",
        epoch=4,
        parallelism=parallelism,
        fingerprint="f",
        guarantee=Guarantee.EXACTLY_ONCE,
        mode=mode,
        attempt=attempt,
    )


def run(p: EpochPlan | None = None, stage_run: int = 0) -> StageRun:
    return StageRun(plan=p or plan(), stage_run=stage_run)


def committed(partition: int, marker: Marker) -> PartitionReport:
    return PartitionReport(
        epoch=marker.epoch,
        partition=partition,
        outcome=PartitionOutcome.COMMITTED,
        rows=marker.rows,
        checksum=marker.checksum,
    )


def lane(lane_: int, token: str, *, partition: int = 0, fenced_all: bool = False) -> ProducerNote:
    return ProducerNote(partition=partition, lane=lane_, token=token, fenced_all=fenced_all)


def prep(lane_: int, token: str, *, partition: int, serial: int) -> ProducerNote:
    """A prepared instance of ``partition``'s lane ``lane_``, prepared under ticket ``serial``."""
    return ProducerNote(partition=partition, lane=lane_, token=token, prepared=True, serial=serial)


# -- the predicates, one condition at a time ---------------------------------------------------
def test_every_rule_has_its_test():
    tests = {name for name, _ in inspect.getmembers(sys.modules[__name__], inspect.isfunction)}
    for rule in _reuse.RULES:
        assert any(t.startswith(f"test_{rule.__name__}") for t in tests), rule.__name__


def test_steady_attempt_only_the_first_attempt_of_everything():
    assert steady_attempt(0, 0, 0)
    assert not steady_attempt(1, 0, 0)  # a Spark task retry
    assert not steady_attempt(0, 1, 0)  # the sink's stage re-run
    assert not steady_attempt(0, 0, 1)  # an in-doubt redo


def test_pooled_in_generation_needs_the_current_generation():
    assert pooled_in_generation("g1", "g1")
    assert not pooled_in_generation("g0", "g1")
    assert not pooled_in_generation(None, "g1")  # nothing kept


def test_known_instance_needs_the_token_the_driver_last_saw():
    assert known_instance("t1", "t1")
    assert not known_instance("t0", "t1")
    assert not known_instance(None, "t1")
    assert not known_instance(None, "")


def test_marker_unchanged_compares_every_field():
    assert marker_unchanged(M3, Marker(3, 10, "c"))
    assert marker_unchanged(None, None)
    assert not marker_unchanged(Marker(4, 10, "c"), M3)  # only the epoch differs
    assert not marker_unchanged(Marker(3, 11, "c"), M3)  # only the row count differs
    assert not marker_unchanged(Marker(3, 10, "d"), M3)  # only the checksum differs
    assert not marker_unchanged(M3, None)  # committed, but not by this generation
    assert not marker_unchanged(None, M3)


def test_partition_seen_only_by_a_served_note_of_the_partition():
    assert partition_seen([lane(1, "t", partition=0)], 0)
    assert not partition_seen([lane(1, "t", partition=1)], 0)
    assert not partition_seen([prep(1, "p", partition=0, serial=1)], 0)
    assert not partition_seen([], 0)


def test_fresh_open_on_own_lane_only_steady_and_gated():
    assert fresh_open_on_own_lane(steady=True, gated=True)
    assert not fresh_open_on_own_lane(steady=True, gated=False)  # unaligned: shared lane
    assert not fresh_open_on_own_lane(steady=False, gated=True)  # a redo: shared lane
    assert not fresh_open_on_own_lane(steady=False, gated=False)


def test_ended_cleanly_only_done_without_a_delivery_error():
    assert ended_cleanly(ParticipantState.DONE, None)
    assert not ended_cleanly(ParticipantState.DONE, RuntimeError("delivery failed"))
    for state in ParticipantState:
        if state is not ParticipantState.DONE:
            assert not ended_cleanly(state, None), state


def test_may_prepare_only_after_a_steady_commit_on_a_claimed_lane():
    assert may_prepare(steady=True, committed=True, claimed=True)
    assert not may_prepare(steady=False, committed=True, claimed=True)
    assert not may_prepare(steady=True, committed=False, claimed=True)
    assert not may_prepare(steady=True, committed=True, claimed=False)


def test_may_prepare_lane_never_over_a_known_instance_and_unaligned_only_seen_partitions():
    seen = (lane(1, "t1", partition=0),)
    gated = ReuseTicket(generation="g", gated=True, known=seen)
    assert may_prepare_lane(gated, 0, 2)  # lane 2 of partition 0: no instance known
    assert may_prepare_lane(gated, 1, 2)  # gated: even a partition not seen yet
    assert not may_prepare_lane(gated, 0, 1)  # lane 1 of partition 0 is known to serve
    ungated = ReuseTicket(generation="g", gated=False, known=seen)
    assert may_prepare_lane(ungated, 0, 2)
    assert not may_prepare_lane(ungated, 1, 2)  # its first open may fence every lane
    assert not may_prepare_lane(ungated, 0, 1)
    only_prepared = ReuseTicket(
        generation="g", gated=False, known=(prep(2, "p", partition=1, serial=1),)
    )
    assert not may_prepare_lane(only_prepared, 1, 1)  # a prepared note is not "seen"


def test_newer_instance_kept_same_generation_and_as_new():
    assert newer_instance_kept("g", 5, generation="g", serial=5)
    assert newer_instance_kept("g", 6, generation="g", serial=5)
    assert not newer_instance_kept("g", 4, generation="g", serial=5)
    assert not newer_instance_kept("old", 9, generation="g", serial=5)


def test_recorded_run_of_a_gated_run_is_one_earlier():
    assert recorded_run(7, gated=True) == 6
    assert recorded_run(7, gated=False) == 7


def test_prepared_order_known_each_condition():
    assert prepared_order_known(5, since=3, fenced_at=4, noted_at=4)
    assert not prepared_order_known(2, since=3, fenced_at=0, noted_at=0)  # older generation
    assert not prepared_order_known(5, since=3, fenced_at=5, noted_at=0)  # fence-all since
    assert not prepared_order_known(5, since=3, fenced_at=0, noted_at=5)  # lane noted since
    assert prepared_order_known(3, since=3, fenced_at=2, noted_at=2)  # the boundaries


# -- the ticket's decision ------------------------------------------------------------------
def test_only_the_first_attempt_of_the_first_run_reuses():
    policy = ReusePolicy()
    assert policy.ticket(run(plan(), 0)).steady(0)
    assert not policy.ticket(run(plan(), 0)).steady(1)  # Spark task retry
    assert not policy.ticket(run(plan(), 1)).steady(0)  # the sink's stage re-run
    assert not policy.ticket(run(plan(attempt=1), 0)).steady(0)  # in-doubt redo


def known_ticket(**kw: object) -> ReuseTicket:
    """Generation g1; the driver saw lane 1 of partition 0 served by instance t1, marker M3."""
    return ReuseTicket(generation="g1", known=(lane(1, "t1"),), markers=((0, M3),), **kw)  # type: ignore[arg-type]


def test_reuse_needs_the_generation_the_known_instance_and_the_known_marker():
    ticket = known_ticket(gated=True)
    reads: list[int] = []

    def read() -> Marker:
        reads.append(1)
        return M3

    ok = ticket.decide(0, 0, lane(1, "t1"), "g1", read)
    assert ok.reuse and ok.marker == M3 and not ok.fence_all
    reads.clear()
    for decision in (
        ticket.decide(0, 0, lane(1, "t1"), "g0", read),  # pooled under an older generation
        ticket.decide(0, 0, None, None, read),  # nothing pooled
        ticket.decide(0, 0, lane(1, "t0"), "g1", read),  # another instance served lane 1 since
        ticket.decide(0, 0, lane(0, "t1"), "g1", read),  # lane 0: never seen
    ):
        assert not decision.reuse and not decision.marker_read
        assert not decision.fence_all, "a first attempt's fresh open fences its own lane"
    unseen = ticket.decide(0, 1, lane(1, "t1"), "g1", read)  # partition 1: never seen served
    assert not unseen.reuse and unseen.fence_all, "unknown instances may exist: every lane"
    assert reads == [], "the marker is read only when it decides"


@pytest.mark.parametrize(
    "read",
    [Marker(4, 10, "c"), Marker(3, 11, "c"), Marker(3, 10, "d"), None],
    ids=["epoch", "rows", "checksum", "none"],
)
def test_a_marker_differing_in_one_field_is_an_unknown_commit(read):
    # marker_unchanged compares the whole marker: an epoch-only comparison would reuse here.
    decision = known_ticket(gated=True).decide(0, 0, lane(1, "t1"), "g1", lambda: read)
    assert not decision.reuse and decision.marker_read and decision.fence_all
    assert decision.marker == read


def test_an_unknown_commit_or_a_retry_fences_every_lane():
    ticket = known_ticket(gated=True)
    other = ticket.decide(0, 0, lane(1, "t1"), "g1", lambda: Marker(4, 1, "d"))
    assert not other.reuse and other.marker_read and other.fence_all  # someone else committed
    assert ticket.decide(1, 0, lane(1, "t1"), "g1", lambda: M3).fence_all  # Spark task retry
    rerun = known_ticket(gated=True, stage_run=1).decide(0, 0, lane(1, "t1"), "g1", lambda: M3)
    assert not rerun.reuse and rerun.fence_all
    # A first attempt's fresh open fences its own lane only (unaligned: the shared lane 0).
    assert not known_ticket(gated=False).decide(0, 0, None, None, lambda: M3).fence_all
    assert (
        ReuseTicket(generation="g1").decide(0, 0, None, None, lambda: M3).fence_all
    )  # nothing seen yet


def test_policy_learns_instances_and_markers_from_a_stage_run():
    policy = ReusePolicy()
    assert policy.ticket(run(plan(), 0)).gated
    assert not policy.ticket(run(plan(mode=CommitMode.UNALIGNED), 0)).gated
    policy.observe(run(), [committed(0, M3)], [lane(0, "a", fenced_all=True)])
    policy.observe(run(), [committed(0, M3)], [lane(1, "b")])  # a single-lane init keeps lane 0
    ticket = policy.ticket(run(plan(), 0))
    assert (ticket.known_token(0, 0), ticket.known_token(0, 1)) == ("a", "b")
    assert dict(ticket.markers) == {0: M3}
    policy.observe(run(), [committed(0, Marker(4, 2, "x"))], [lane(1, "c", fenced_all=True)])
    ticket = policy.ticket(run(plan(), 0))
    assert (ticket.known_token(0, 0), ticket.known_token(0, 1)) == (None, "c")
    assert dict(ticket.markers) == {0: Marker(4, 2, "x")}
    skipped = PartitionReport(epoch=4, partition=0, outcome=PartitionOutcome.ALREADY_COMMITTED)
    policy.observe(run(), [skipped], [])
    assert dict(policy.ticket(run(plan(), 0)).markers) == {}
    policy.observe(run(), [committed(0, M3)], [lane(0, "a")])
    policy.renew("a failed epoch")  # forgets everything it learned
    ticket = policy.ticket(run(plan(), 0))
    assert ticket.known == () and ticket.markers == ()


@pytest.mark.parametrize("event", list(StageEvent))
def test_policy_renews_on_every_stage_event(event):
    policy = ReusePolicy()
    first = policy.ticket(run(plan(), 0)).generation
    assert policy.ticket(run(plan(), 0)).generation == first
    policy.observe(run(), [committed(0, M3)], [lane(0, "a")])
    policy.on_event(event)
    second = policy.ticket(run(plan(), 0))
    assert second.generation != first and second.known == () and second.markers == ()


def test_ticket_and_note_pickle():
    ticket = ReuseTicket(
        generation="g",
        plan_attempt=1,
        stage_run=2,
        gated=True,
        known=(lane(1, "t"),),
        markers=((0, M3),),
        serial=7,
    )
    assert pickle.loads(pickle.dumps(ticket)) == ticket
    note = lane(2, "t", fenced_all=True)
    assert pickle.loads(pickle.dumps(note)) == note
    prepared = prep(1, "p", partition=1, serial=7)
    back = pickle.loads(pickle.dumps(prepared))
    assert back == prepared and back.prepared and back.serial == 7 and not back.reused


def test_a_prepared_instance_is_learned_and_reused_like_a_served_one():
    policy = ReusePolicy()
    first = policy.ticket(run(plan(), 0))  # aligned; nothing known: both tasks fence every lane
    policy.observe(
        run(),
        [committed(0, M3), committed(1, M3)],
        [lane(0, "a0", fenced_all=True), lane(1, "b1", partition=1, fenced_all=True)],
    )
    second = policy.ticket(run(plan(), 0))
    # Each worker prepared its lane of the other partition after the first run's commit;
    # its task of the second run reports it.
    policy.observe(
        run(),
        [committed(0, M3), committed(1, M3)],
        [
            lane(0, "a0"),
            prep(0, "a1", partition=1, serial=first.serial),
            lane(1, "b1", partition=1),
            prep(1, "b0", partition=0, serial=first.serial),
        ],
    )
    third = policy.ticket(run(plan(), 0))
    assert second.known_token(1, 0) is None
    assert (third.known_token(1, 0), third.known_token(0, 1)) == ("a1", "b0")
    swapped = third.decide(0, 1, lane(0, "a1"), third.generation, lambda: M3)
    assert swapped.reuse and not swapped.fence_all


def test_a_prepared_note_never_makes_a_partition_seen():
    # partition_seen: only a served note shows the driver has seen the partition's instances.
    ticket = ReuseTicket(generation="g", known=(prep(1, "p", partition=0, serial=1),))
    assert ticket.decide(0, 0, None, None, lambda: None).fence_all


def test_a_prepared_note_whose_order_against_a_fence_all_is_unknown_is_dropped():
    # Unaligned: a fence-all of partition 1 in the run the preparation began in (or later)
    # may have come after it, whatever the order of the notes in the results. (Kafka: the
    # preparation on worker lane 2; the fence-all, a first open or a Spark task retry, on
    # the shared lane 0.)
    for notes in (
        lambda s: [prep(2, "p", partition=1, serial=s), lane(0, "x", partition=1, fenced_all=True)],
        lambda s: [lane(0, "x", partition=1, fenced_all=True), prep(2, "p", partition=1, serial=s)],
    ):
        policy = ReusePolicy()
        ticket = policy.ticket(run(plan(mode=CommitMode.UNALIGNED), 0))
        policy.observe(run(), [], notes(ticket.serial))
        after = policy.ticket(run(plan(mode=CommitMode.UNALIGNED), 0))
        assert (after.known_token(1, 2), after.known_token(1, 0)) == (None, "x")
    # A later run's fence-all drops a preparation reported after it, too.
    policy = ReusePolicy()
    early = policy.ticket(run(plan(mode=CommitMode.UNALIGNED), 0))
    policy.ticket(run(plan(mode=CommitMode.UNALIGNED), 0))
    policy.observe(run(), [], [lane(1, "x", partition=1, fenced_all=True)])
    policy.ticket(run(plan(mode=CommitMode.UNALIGNED), 0))
    policy.observe(run(), [], [prep(0, "p", partition=1, serial=early.serial)])
    assert policy.ticket(run(plan(), 0)).known_token(1, 0) is None


def test_a_gated_runs_own_fence_all_precedes_its_preparations():
    # Aligned: every open of a run (its fence-alls too) precedes every commit, and a
    # preparation starts after a commit: it survives the run's fence-all, in any order.
    policy = ReusePolicy()
    ticket = policy.ticket(run(plan(), 0))
    policy.observe(
        run(),
        [],
        [
            prep(0, "p", partition=1, serial=ticket.serial),
            lane(1, "x", partition=1, fenced_all=True),
        ],
    )
    after = policy.ticket(run(plan(), 0))
    assert (after.known_token(1, 0), after.known_token(1, 1)) == ("p", "x")
    # ... but not a fence-all of the next gated run (it may follow the preparation).
    policy.observe(run(), [], [lane(1, "y", partition=1, fenced_all=True)])
    policy.ticket(run(plan(), 0))
    policy.observe(run(), [], [prep(0, "q", partition=1, serial=ticket.serial)])
    assert policy.ticket(run(plan(), 0)).known_token(1, 0) is None


def test_two_instances_of_one_lane_in_unknown_order_are_both_forgotten():
    policy = ReusePolicy()
    ticket = policy.ticket(run(plan(mode=CommitMode.UNALIGNED), 0))
    policy.observe(run(), [], [lane(1, "x", partition=1, fenced_all=True)])
    later = policy.ticket(run(plan(mode=CommitMode.UNALIGNED), 0))
    # Another host's worker of lane 0 served partition 1 (fresh) in the run this
    # preparation began in: which initialized last is unknown.
    policy.observe(
        run(), [], [lane(0, "h", partition=1), prep(0, "p", partition=1, serial=later.serial)]
    )
    after = policy.ticket(run(plan(mode=CommitMode.UNALIGNED), 0))
    assert (after.known_token(1, 0), after.known_token(1, 1)) == (None, "x")
    assert ticket.serial < later.serial < after.serial


def test_a_preparation_of_an_older_generation_is_dropped():
    policy = ReusePolicy()
    ticket = policy.ticket(run(plan(), 0))
    policy.renew("a Spark task retry")  # e.g. during the run whose task reports it
    policy.observe(
        run(), [], [lane(0, "a", fenced_all=True), prep(1, "p", partition=1, serial=ticket.serial)]
    )
    assert policy.ticket(run(plan(), 0)).known_token(1, 1) is None


def test_the_debug_log_names_each_notes_fate(caplog):
    # What tells, in a trace, why a worker's preparation never served (benchmarks/HISTORY.md 6.2).
    unaligned = plan(mode=CommitMode.UNALIGNED)
    with caplog.at_level(logging.DEBUG, logger="connectors.kafka.sink.reuse"):
        policy = ReusePolicy()
        first = policy.ticket(run(unaligned, 0))
        policy.observe(run(), [], [lane(0, "x", partition=1, fenced_all=True)])
        second = policy.ticket(run(unaligned, 0))
        served = lane(0, "h", partition=0)
        policy.observe(
            run(),
            [],
            [
                served,
                prep(1, "old", partition=1, serial=first.serial),
                prep(0, "same", partition=0, serial=second.serial),
                prep(1, "ok", partition=0, serial=second.serial),
            ],
        )
        policy.renew("a test")
        policy.ticket(run(unaligned, 0))
        policy.observe(run(), [], [prep(2, "stale", partition=0, serial=second.serial)])
        policy.ticket(run(unaligned, 0))
    fates = {}
    for line in [r.getMessage() for r in caplog.records]:
        if ": partition " in line:  # "ticket N: partition P lane K: <how> <token> ..."
            fates[line.split(": ")[2].split()[1].rstrip(",")] = line
    assert fates["x"].endswith("new x, every lane fenced learned")
    assert fates["h"].endswith("new h learned")
    assert fates["old"].endswith(f"dropped: every lane fenced at ticket {first.serial}")
    assert "dropped with the lane's note of ticket" in fates["same"]
    assert fates["ok"].endswith(f"prepared ok under ticket {second.serial} learned")
    assert "dropped: prepared before this generation" in fates["stale"]
