"""GroupCoordinator's offset-commit rules and offset retention (Kafka's rules, see docs)."""

import asyncio

from kio.schema.errors import ErrorCode

from minikafka import BrokerConfig
from minikafka._groups import GroupCoordinator
from minikafka._journal import Journal
from minikafka._offsets import CommittedOffset, OffsetStore
from tests.minikafka.clock import ManualClock

TP = ("t", 0)
RETENTION_MS = 10_000


def _rig() -> tuple[GroupCoordinator, OffsetStore, ManualClock]:
    clock = ManualClock()
    offsets = OffsetStore(Journal(None, fsync=False), clock)
    cfg = BrokerConfig(group_initial_rebalance_delay_ms=0, offsets_retention_ms=RETENTION_MS)
    return GroupCoordinator(cfg, offsets, clock), offsets, clock


def _join(groups: GroupCoordinator, group: str) -> dict:
    request = {
        "group_id": group,
        "member_id": "",
        "instance_id": None,
        "client_id": "c",
        "client_host": "h",
        "session_timeout_ms": 30_000,
        "rebalance_timeout_ms": 30_000,
        "protocol_type": "consumer",
        "protocols": [("range", b"")],
    }
    return asyncio.run(groups.join(request))


def _commit(offsets: OffsetStore, clock: ManualClock, group: str) -> None:
    offsets.commit(
        group,
        {TP: CommittedOffset(offset=1, metadata=None, leader_epoch=-1, commit_ms=clock.wall_ms())},
    )


def test_commit_without_generation_is_allowed_only_while_the_group_has_no_members():
    groups, _, _ = _rig()
    assert groups.check_commit("g", "", -1) == ErrorCode.none
    assert groups.check_commit("g", "m", 3) == ErrorCode.illegal_generation  # unknown group
    joined = _join(groups, "g")
    assert joined["error_code"] == ErrorCode.none
    member, generation = joined["member_id"], joined["generation_id"]
    assert groups.check_commit("g", "", -1) == ErrorCode.unknown_member_id
    # Joined but not synced yet: CompletingRebalance.
    assert groups.check_commit("g", member, generation) == ErrorCode.rebalance_in_progress
    assert groups.check_commit("g", member, generation + 1) == ErrorCode.illegal_generation
    assert groups.check_commit("g", "stranger", generation) == ErrorCode.unknown_member_id
    assert groups.leave("g", [member]) == {member: ErrorCode.none}
    assert groups.check_commit("g", "", -1) == ErrorCode.none


def test_transactional_commit_checks_member_and_generation_only_when_given():
    groups, _, _ = _rig()
    assert groups.check_txn_commit("g", "", -1) == ErrorCode.none
    assert groups.check_txn_commit("g", "", 0) == ErrorCode.none  # a new group has generation 0
    assert groups.check_txn_commit("g", "", 1) == ErrorCode.illegal_generation
    assert groups.check_txn_commit("g", "m", -1) == ErrorCode.unknown_member_id
    joined = _join(groups, "g")
    member, generation = joined["member_id"], joined["generation_id"]
    assert groups.check_txn_commit("g", "", -1) == ErrorCode.none  # even with members
    assert groups.check_txn_commit("g", member, generation) == ErrorCode.none
    assert groups.check_txn_commit("g", member, generation - 1) == ErrorCode.illegal_generation


def test_offsets_of_a_group_without_members_expire_after_the_retention():
    groups, offsets, clock = _rig()
    _commit(offsets, clock, "standalone")
    assert [g.group_id for g in groups.list_groups()] == ["standalone"]
    assert groups.summary("standalone").state == "Empty"
    clock.advance(RETENTION_MS - 1)
    groups.expire_offsets()
    assert offsets.partitions("standalone") == [TP]
    clock.advance(1)
    groups.expire_offsets()
    assert offsets.partitions("standalone") == []
    assert groups.summary("standalone").state == "Dead" and groups.list_groups() == []


def test_offsets_are_kept_while_members_remain_and_expire_after_the_group_empties():
    groups, offsets, clock = _rig()
    member = _join(groups, "g")["member_id"]
    _commit(offsets, clock, "g")
    clock.advance(5 * RETENTION_MS)
    groups.expire_offsets()
    assert offsets.partitions("g") == [TP], "a group with members keeps its offsets"
    groups.leave("g", [member])
    clock.advance(RETENTION_MS - 1)
    groups.expire_offsets()
    assert offsets.partitions("g") == [TP], "retention counts from when the group became empty"
    clock.advance(1)
    groups.expire_offsets()
    assert offsets.partitions("g") == [] and groups.list_groups() == []


def test_delete_group():
    groups, offsets, clock = _rig()
    assert groups.delete("nope") == ErrorCode.group_id_not_found
    _commit(offsets, clock, "g")
    member = _join(groups, "g")["member_id"]
    assert groups.delete("g") == ErrorCode.non_empty_group
    groups.leave("g", [member])
    assert groups.delete("g") == ErrorCode.none
    assert not offsets.has_group("g") and groups.summary("g").state == "Dead"
