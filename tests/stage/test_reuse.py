"""Unit tests of the client-reuse rules (connectors/stage/_reuse.py), the one owner of them."""

import logging
import pickle

from connectors.stage import ClientNote, ReusePolicy, ReuseTicket
from txn import CommitMode, EpochPlan, Guarantee, Marker, PartitionOutcome, PartitionReport

M3 = Marker(3, 10, "c")


def plan(
    attempt: int = 0, parallelism: int = 2, mode: CommitMode = CommitMode.ALIGNED
) -> EpochPlan:
    return EpochPlan("s", 4, parallelism, "f", Guarantee.EXACTLY_ONCE, mode, attempt=attempt)


def committed(partition: int, marker: Marker) -> PartitionReport:
    return PartitionReport(
        marker.epoch, partition, PartitionOutcome.COMMITTED, marker.rows, marker.checksum
    )


def lane(lane_: int, token: str, *, partition: int = 0, fenced_all: bool = False) -> ClientNote:
    return ClientNote(partition, lane_, token, fenced_all)


def test_only_the_first_attempt_of_the_first_run_reuses():
    policy = ReusePolicy()
    assert policy.ticket(plan(), 0).may_reuse(0)
    assert not policy.ticket(plan(), 0).may_reuse(1)  # Spark task retry
    assert not policy.ticket(plan(), 1).may_reuse(0)  # the sink's stage re-run
    assert not policy.ticket(plan(attempt=1), 0).may_reuse(0)  # in-doubt redo


def known_ticket(**kw: object) -> ReuseTicket:
    """Generation g1; the driver saw lane 1 of partition 0 served by instance t1, marker M3."""
    return ReuseTicket("g1", known=(lane(1, "t1"),), markers=((0, M3),), **kw)  # type: ignore[arg-type]


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


def test_an_unknown_commit_or_a_retry_fences_every_lane():
    ticket = known_ticket(gated=True)
    other = ticket.decide(0, 0, lane(1, "t1"), "g1", lambda: Marker(4, 1, "d"))
    assert not other.reuse and other.marker_read and other.fence_all  # someone else committed
    assert ticket.decide(1, 0, lane(1, "t1"), "g1", lambda: M3).fence_all  # Spark task retry
    rerun = known_ticket(gated=True, stage_run=1).decide(0, 0, lane(1, "t1"), "g1", lambda: M3)
    assert not rerun.reuse and rerun.fence_all
    # A first attempt's fresh open fences its own lane only (unaligned: the shared lane 0).
    assert not known_ticket(gated=False).decide(0, 0, None, None, lambda: M3).fence_all
    assert ReuseTicket("g1").decide(0, 0, None, None, lambda: M3).fence_all  # nothing seen yet


def test_policy_learns_instances_and_markers_from_a_stage_run():
    policy = ReusePolicy()
    assert policy.ticket(plan(), 0).gated
    assert not policy.ticket(plan(mode=CommitMode.UNALIGNED), 0).gated
    policy.observe([committed(0, M3)], [lane(0, "a", fenced_all=True)])
    policy.observe([committed(0, M3)], [lane(1, "b")])  # a single-lane init keeps lane 0
    ticket = policy.ticket(plan(), 0)
    assert (ticket.known_token(0, 0), ticket.known_token(0, 1)) == ("a", "b")
    assert dict(ticket.markers) == {0: M3}
    policy.observe([committed(0, Marker(4, 2, "x"))], [lane(1, "c", fenced_all=True)])
    ticket = policy.ticket(plan(), 0)
    assert (ticket.known_token(0, 0), ticket.known_token(0, 1)) == (None, "c")
    assert dict(ticket.markers) == {0: Marker(4, 2, "x")}
    skipped = PartitionReport(4, 0, PartitionOutcome.ALREADY_COMMITTED)
    policy.observe([skipped], [])
    assert dict(policy.ticket(plan(), 0).markers) == {}
    policy.observe([committed(0, M3)], [lane(0, "a")])
    policy.renew("a failed epoch")  # forgets everything it learned
    ticket = policy.ticket(plan(), 0)
    assert ticket.known == () and ticket.markers == ()


def test_policy_renews_on_events_and_on_a_parallelism_change():
    policy = ReusePolicy()
    first = policy.ticket(plan(parallelism=2), 0).generation
    assert policy.ticket(plan(parallelism=2), 0).generation == first
    policy.renew("a failed epoch")
    second = policy.ticket(plan(parallelism=2), 0).generation
    assert second != first
    policy.observe([], [lane(0, "a")])
    third = policy.ticket(plan(parallelism=3), 0)
    assert third.generation != second and third.known == ()


def test_ticket_and_note_pickle():
    ticket = ReuseTicket("g", 1, 2, True, (lane(1, "t"),), ((0, M3),), serial=7)
    assert pickle.loads(pickle.dumps(ticket)) == ticket
    note = lane(2, "t", fenced_all=True)
    assert pickle.loads(pickle.dumps(note)) == note
    prepared = prep(1, "p", partition=1, serial=7)
    back = pickle.loads(pickle.dumps(prepared))
    assert back == prepared and back.prepared and back.serial == 7 and not back.reused


def prep(lane_: int, token: str, *, partition: int, serial: int) -> ClientNote:
    """A prepared instance of ``partition``'s lane ``lane_``, prepared under ticket ``serial``."""
    return ClientNote(partition, lane_, token, False, prepared=True, serial=serial)


def test_a_prepared_instance_is_learned_and_reused_like_a_served_one():
    policy = ReusePolicy()
    first = policy.ticket(plan(), 0)  # aligned; nothing known: both tasks fence every lane
    policy.observe(
        [committed(0, M3), committed(1, M3)],
        [lane(0, "a0", fenced_all=True), lane(1, "b1", partition=1, fenced_all=True)],
    )
    second = policy.ticket(plan(), 0)
    # Each worker prepared its lane of the other partition after the first run's commit;
    # its task of the second run reports it.
    policy.observe(
        [committed(0, M3), committed(1, M3)],
        [
            lane(0, "a0"),
            prep(0, "a1", partition=1, serial=first.serial),
            lane(1, "b1", partition=1),
            prep(1, "b0", partition=0, serial=first.serial),
        ],
    )
    third = policy.ticket(plan(), 0)
    assert second.known_token(1, 0) is None
    assert (third.known_token(1, 0), third.known_token(0, 1)) == ("a1", "b0")
    swapped = third.decide(0, 1, lane(0, "a1"), third.generation, lambda: M3)
    assert swapped.reuse and not swapped.fence_all


def test_a_prepared_note_never_makes_a_partition_seen():
    # Rule 5: only a served note shows the driver has seen the partition's instances.
    ticket = ReuseTicket("g", known=(prep(1, "p", partition=0, serial=1),))
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
        ticket = policy.ticket(plan(mode=CommitMode.UNALIGNED), 0)
        policy.observe([], notes(ticket.serial))
        after = policy.ticket(plan(mode=CommitMode.UNALIGNED), 0)
        assert (after.known_token(1, 2), after.known_token(1, 0)) == (None, "x")
    # A later run's fence-all drops a preparation reported after it, too.
    policy = ReusePolicy()
    early = policy.ticket(plan(mode=CommitMode.UNALIGNED), 0)
    policy.ticket(plan(mode=CommitMode.UNALIGNED), 0)
    policy.observe([], [lane(1, "x", partition=1, fenced_all=True)])
    policy.ticket(plan(mode=CommitMode.UNALIGNED), 0)
    policy.observe([], [prep(0, "p", partition=1, serial=early.serial)])
    assert policy.ticket(plan(), 0).known_token(1, 0) is None


def test_a_gated_runs_own_fence_all_precedes_its_preparations():
    # Aligned: every open of a run (its fence-alls too) precedes every commit, and a
    # preparation starts after a commit: it survives the run's fence-all, in any order.
    policy = ReusePolicy()
    ticket = policy.ticket(plan(), 0)
    policy.observe(
        [],
        [
            prep(0, "p", partition=1, serial=ticket.serial),
            lane(1, "x", partition=1, fenced_all=True),
        ],
    )
    after = policy.ticket(plan(), 0)
    assert (after.known_token(1, 0), after.known_token(1, 1)) == ("p", "x")
    # ... but not a fence-all of the next gated run (it may follow the preparation).
    policy.observe([], [lane(1, "y", partition=1, fenced_all=True)])
    policy.ticket(plan(), 0)
    policy.observe([], [prep(0, "q", partition=1, serial=ticket.serial)])
    assert policy.ticket(plan(), 0).known_token(1, 0) is None


def test_two_instances_of_one_lane_in_unknown_order_are_both_forgotten():
    policy = ReusePolicy()
    ticket = policy.ticket(plan(mode=CommitMode.UNALIGNED), 0)
    policy.observe([], [lane(1, "x", partition=1, fenced_all=True)])
    later = policy.ticket(plan(mode=CommitMode.UNALIGNED), 0)
    # Another host's worker of lane 0 served partition 1 (fresh) in the run this
    # preparation began in: which initialized last is unknown.
    policy.observe([], [lane(0, "h", partition=1), prep(0, "p", partition=1, serial=later.serial)])
    after = policy.ticket(plan(mode=CommitMode.UNALIGNED), 0)
    assert (after.known_token(1, 0), after.known_token(1, 1)) == (None, "x")
    assert ticket.serial < later.serial < after.serial


def test_a_preparation_of_an_older_generation_is_dropped():
    policy = ReusePolicy()
    ticket = policy.ticket(plan(), 0)
    policy.renew("a Spark task retry")  # e.g. during the run whose task reports it
    policy.observe(
        [], [lane(0, "a", fenced_all=True), prep(1, "p", partition=1, serial=ticket.serial)]
    )
    assert policy.ticket(plan(), 0).known_token(1, 1) is None


def test_the_debug_log_names_each_notes_fate(caplog):
    # What tells, in a trace, why a worker's preparation never served (benchmarks/HISTORY.md 6.2).
    unaligned = plan(mode=CommitMode.UNALIGNED)
    with caplog.at_level(logging.DEBUG, logger="connectors.stage.reuse"):
        policy = ReusePolicy()
        first = policy.ticket(unaligned, 0)
        policy.observe([], [lane(0, "x", partition=1, fenced_all=True)])
        second = policy.ticket(unaligned, 0)
        served = lane(0, "h", partition=0)
        policy.observe(
            [],
            [
                served,
                prep(1, "old", partition=1, serial=first.serial),
                prep(0, "same", partition=0, serial=second.serial),
                prep(1, "ok", partition=0, serial=second.serial),
            ],
        )
        policy.renew("a test")
        policy.ticket(unaligned, 0)
        policy.observe([], [prep(2, "stale", partition=0, serial=second.serial)])
        policy.ticket(unaligned, 0)
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
