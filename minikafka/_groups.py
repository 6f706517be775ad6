"""Group coordinator: classic consumer-group membership and the rules of offset commits.

Rebalance protocol (classic, eager):
1. A JoinGroup moves the group to PreparingRebalance; the join is answered when every
   known member has rejoined (after ``group_initial_rebalance_delay_ms`` for a group
   that was empty) or when the rebalance timeout drops the members that did not.
2. Completing the join bumps the generation, picks the protocol every member
   supports (the leader's first choice among them), and sends the member list to the
   leader only. The group is then CompletingRebalance.
3. SyncGroup from the leader stores the assignments, answers every waiting member
   and makes the group Stable. A new join during steps 2-3 answers waiting syncs
   with REBALANCE_IN_PROGRESS.
4. Heartbeats keep members alive; a member silent for its session timeout is
   removed and triggers a rebalance. LeaveGroup removes members at once.

Offsets live in the :class:`~minikafka._offsets.OffsetStore`; this module decides
whether a commit is allowed (Kafka's rules, see :meth:`GroupCoordinator.check_commit`)
and when the offsets of a group without members expire (:meth:`GroupCoordinator.expire_offsets`).
A group exists while it has members or offsets; membership is not persisted.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ._clock import Clock
from ._config import BrokerConfig
from ._offsets import OffsetStore

log = logging.getLogger("minikafka.groups")
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
)


@dataclass(kw_only=True)
class GroupMember:
    """One member of a consumer group."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    last_heartbeat: float
    assignment: bytes = b""
    join_future: asyncio.Future[dict[str, Any]] | None = None
    sync_future: asyncio.Future[dict[str, Any]] | None = None


@dataclass(kw_only=True)
class Group:
    """Membership of one group id."""

    group_id: str
    state: str = EMPTY
    state_ms: int = 0  # wall time of the last state change
    generation: int = 0
    protocol_type: str = ""
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, GroupMember] = field(default_factory=dict)
    join_deadline: float = 0.0
    earliest_completion: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSummary:
    """A ListGroups / DescribeGroups view of one group."""

    group_id: str
    state: str
    protocol_type: str
    protocol_name: str


class GroupCoordinator:
    """All consumer groups of the broker."""

    def __init__(self, config: BrokerConfig, offsets: OffsetStore, clock: Clock) -> None:
        self._config = config
        self._offsets = offsets
        self._clock = clock
        self.groups: dict[str, Group] = {}

    def _member_group(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            g = Group(group_id=group_id, state_ms=self._clock.wall_ms())
            self.groups[group_id] = g
        return g

    def _set_state(self, g: Group, state: str) -> None:
        if g.state != state:
            g.state = state
            g.state_ms = self._clock.wall_ms()

    # ---- offset commit rules -----------------------------------------------------
    def check_commit(self, group_id: str, member_id: str, generation: int) -> ErrorCode:
        """Whether a plain OffsetCommit may store offsets (Kafka's order of checks).

        Generation -1 (a consumer without group management, or the admin client) may
        commit while the group has no members; a group member must be known, of the
        current generation, and not in CompletingRebalance.
        """
        g = self.groups.get(group_id)
        if g is None or (not g.members and g.state == EMPTY):
            if generation < 0:
                return ErrorCode.none
            if g is None and not self._offsets.has_group(group_id):
                return ErrorCode.illegal_generation
        if g is None or member_id not in g.members:
            return ErrorCode.unknown_member_id
        if generation != g.generation:
            return ErrorCode.illegal_generation
        if g.state == COMPLETING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def check_txn_commit(self, group_id: str, member_id: str, generation: int) -> ErrorCode:
        """Whether a TxnOffsetCommit may add pending offsets (KIP-447).

        A member id and a generation are enforced only when given (not empty / not -1);
        a group that does not exist yet has generation 0.
        """
        g = self.groups.get(group_id)
        if member_id and (g is None or member_id not in g.members):
            return ErrorCode.unknown_member_id
        current = g.generation if g is not None else 0
        if generation >= 0 and generation != current:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def expire_offsets(self) -> None:
        """Drop expired offsets of groups without members, then forget groups left empty."""
        now = self._clock.wall_ms()
        for group_id in self._offsets.groups():
            g = self.groups.get(group_id)
            if g is not None and g.members:
                continue
            empty_since = g.state_ms if g is not None and g.protocol_type else None
            gone = self._offsets.expire(
                group_id, now, self._config.offsets_retention_ms, empty_since
            )
            if gone:
                log.info("group %s: %d offsets expired", group_id, len(gone))
        for group_id, g in list(self.groups.items()):
            if not g.members and g.state == EMPTY and not self._offsets.has_group(group_id):
                del self.groups[group_id]

    # ---- group views -------------------------------------------------------------
    def summary(self, group_id: str) -> GroupSummary:
        """State of one group; ``Dead`` when it has neither members nor offsets."""
        g = self.groups.get(group_id)
        if g is not None:
            return GroupSummary(
                group_id=group_id,
                state=g.state,
                protocol_type=g.protocol_type,
                protocol_name=g.protocol_name or "",
            )
        if self._offsets.has_group(group_id):
            return GroupSummary(group_id=group_id, state=EMPTY, protocol_type="", protocol_name="")
        return GroupSummary(group_id=group_id, state=DEAD, protocol_type="", protocol_name="")

    def list_groups(self) -> list[GroupSummary]:
        """Every group with members or offsets."""
        names = set(self.groups) | set(self._offsets.groups())
        return [self.summary(name) for name in sorted(names)]

    def members(self, group_id: str) -> list[GroupMember]:
        """Return the current members of ``group_id``."""
        g = self.groups.get(group_id)
        return list(g.members.values()) if g is not None else []

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups for one group: only a group without members, with its offsets."""
        g = self.groups.get(group_id)
        if g is None and not self._offsets.has_group(group_id):
            return ErrorCode.group_id_not_found
        if g is not None and g.members:
            return ErrorCode.non_empty_group
        self._offsets.delete_group(group_id)
        self.groups.pop(group_id, None)
        return ErrorCode.none

    # ---- membership ------------------------------------------------------------
    async def join(self, req: dict[str, Any]) -> dict[str, Any]:
        """JoinGroup; resolves when the rebalance completes."""
        cfg = self._config
        session = req["session_timeout_ms"]
        if not cfg.group_min_session_timeout_ms <= session <= cfg.group_max_session_timeout_ms:
            return {"error_code": ErrorCode.invalid_session_timeout, "member_id": req["member_id"]}
        g = self._member_group(req["group_id"])
        if g.members and g.protocol_type and req["protocol_type"] != g.protocol_type:
            return {"error_code": ErrorCode.inconsistent_group_protocol}
        member_id = req["member_id"]
        if member_id and member_id not in g.members:
            return {"error_code": ErrorCode.unknown_member_id, "member_id": member_id}
        if not member_id:
            member_id = f"{req['client_id'] or 'member'}-{uuid.uuid4()}"
        member = g.members.get(member_id)
        if member is None:
            member = GroupMember(
                member_id=member_id,
                instance_id=req["instance_id"],
                client_id=req["client_id"],
                client_host=req["client_host"],
                session_timeout_ms=session,
                rebalance_timeout_ms=req["rebalance_timeout_ms"],
                protocols=req["protocols"],
                last_heartbeat=self._clock.monotonic_s(),
            )
            g.members[member_id] = member
        else:
            member.protocols = req["protocols"]
            member.session_timeout_ms = session
            member.rebalance_timeout_ms = req["rebalance_timeout_ms"]
        g.protocol_type = req["protocol_type"]
        member.last_heartbeat = self._clock.monotonic_s()
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result({"error_code": ErrorCode.rebalance_in_progress})
        member.join_future = fut
        if g.state != PREPARING:
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return await fut

    def _prepare_rebalance(self, g: Group) -> None:
        now = self._clock.monotonic_s()
        was_empty = g.state == EMPTY
        self._set_state(g, PREPARING)
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.join_deadline = now + timeout / 1000
        delay = self._config.group_initial_rebalance_delay_ms if was_empty else 0
        g.earliest_completion = now + delay / 1000
        for m in g.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result({"error_code": ErrorCode.rebalance_in_progress})
            m.sync_future = None

    def _maybe_complete_join(self, g: Group, *, force: bool = False) -> None:
        if g.state != PREPARING:
            return
        now = self._clock.monotonic_s()
        all_joined = all(m.join_future is not None for m in g.members.values())
        if not ((all_joined and now >= g.earliest_completion) or force or now >= g.join_deadline):
            return
        for mid in [mid for mid, m in g.members.items() if m.join_future is None]:
            log.info("group %s: member %s did not rejoin in time, removed", g.group_id, mid)
            del g.members[mid]
        g.generation += 1
        if not g.members:
            g.leader, g.protocol_name = None, None
            self._set_state(g, EMPTY)
            return
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        leader = g.members[g.leader]
        common = [
            name
            for name, _ in leader.protocols
            if all(any(n == name for n, _ in m.protocols) for m in g.members.values())
        ]
        if not common:
            for m in g.members.values():
                self._resolve_join(m, {"error_code": ErrorCode.inconsistent_group_protocol})
            g.members.clear()
            self._set_state(g, EMPTY)
            return
        g.protocol_name = common[0]
        self._set_state(g, COMPLETING)
        member_list = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "metadata": dict(m.protocols)[g.protocol_name],
            }
            for m in g.members.values()
        ]
        for m in g.members.values():
            self._resolve_join(
                m,
                {
                    "error_code": ErrorCode.none,
                    "generation_id": g.generation,
                    "protocol_type": g.protocol_type,
                    "protocol_name": g.protocol_name,
                    "leader": g.leader,
                    "member_id": m.member_id,
                    "members": member_list if m.member_id == g.leader else [],
                },
            )

    def _resolve_join(self, m: GroupMember, resp: dict[str, Any]) -> None:
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(resp)
        m.join_future = None
        m.last_heartbeat = self._clock.monotonic_s()

    async def sync(
        self, group_id: str, member_id: str, generation: int, assignments: dict[str, bytes]
    ) -> dict[str, Any]:
        """SyncGroup; followers wait for the leader's assignments."""
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return {"error_code": ErrorCode.unknown_member_id}
        if generation != g.generation:
            return {"error_code": ErrorCode.illegal_generation}
        if g.state == PREPARING:
            return {"error_code": ErrorCode.rebalance_in_progress}
        member = g.members[member_id]
        member.last_heartbeat = self._clock.monotonic_s()
        ok = {"protocol_type": g.protocol_type, "protocol_name": g.protocol_name}
        if g.state == STABLE:
            return {"error_code": ErrorCode.none, "assignment": member.assignment, **ok}
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        member.sync_future = fut
        if member_id == g.leader:
            for m in g.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self._set_state(g, STABLE)
            for m in g.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result(
                        {"error_code": ErrorCode.none, "assignment": m.assignment, **ok}
                    )
                m.sync_future = None
        return await fut

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> ErrorCode:
        """Heartbeat."""
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return ErrorCode.unknown_member_id
        g.members[member_id].last_heartbeat = self._clock.monotonic_s()
        if g.state == PREPARING:
            return ErrorCode.rebalance_in_progress
        if generation != g.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def leave(self, group_id: str, member_ids: list[str]) -> dict[str, ErrorCode]:
        """LeaveGroup; error per member id."""
        g = self.groups.get(group_id)
        out: dict[str, ErrorCode] = {}
        for mid in member_ids:
            if g is None or mid not in g.members:
                out[mid] = ErrorCode.unknown_member_id
                continue
            self._remove(g, mid)
            out[mid] = ErrorCode.none
        return out

    def _remove(self, g: Group, member_id: str) -> None:
        m = g.members.pop(member_id)
        self._resolve_join(m, {"error_code": ErrorCode.unknown_member_id})
        if m.sync_future is not None and not m.sync_future.done():
            m.sync_future.set_result({"error_code": ErrorCode.unknown_member_id})
        if g.state in (STABLE, COMPLETING, EMPTY):
            self._prepare_rebalance(g)
            g.earliest_completion = 0.0
        self._maybe_complete_join(g)

    def tick(self) -> None:
        """Expire silent members and complete rebalances whose wait is over."""
        now = self._clock.monotonic_s()
        for g in list(self.groups.values()):
            for mid, m in list(g.members.items()):
                if m.join_future is None and now - m.last_heartbeat > m.session_timeout_ms / 1000:
                    log.info("group %s: member %s session expired", g.group_id, mid)
                    self._remove(g, mid)
            self._maybe_complete_join(g)
