"""Group coordinator: classic consumer-group membership and committed offsets.

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

Offsets: plain commits are journaled at once; transactional commits stay pending per
(group, producer id) until the transaction coordinator completes the transaction.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ._journal import Entry

if TYPE_CHECKING:
    from ._broker import Broker

log = logging.getLogger("minikafka.groups")
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
)
TopicPartition = tuple[str, int]
OffsetValue = tuple[int, str | None, int]  # offset, metadata, leader epoch


@dataclass
class Member:
    """One member of a consumer group."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    last_heartbeat: float = field(default_factory=time.monotonic)
    assignment: bytes = b""
    join_future: asyncio.Future[dict[str, Any]] | None = None
    sync_future: asyncio.Future[dict[str, Any]] | None = None


@dataclass
class Group:
    """Membership and offsets of one group id."""

    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str = ""
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[TopicPartition, OffsetValue] = field(default_factory=dict)
    pending: dict[int, dict[TopicPartition, OffsetValue]] = field(default_factory=dict)
    join_deadline: float = 0.0
    earliest_completion: float = 0.0


class GroupCoordinator:
    """All consumer groups of the broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.groups: dict[str, Group] = {}

    # ---- persistence -------------------------------------------------------------
    def apply(self, entry: Entry) -> bool:
        """Apply a replayed journal entry; False if it is not ours."""
        kind = entry["t"]
        if kind == "off":
            g = self._group(entry["g"])
            for t, p, off, meta, le in entry["o"]:
                g.offsets[(t, p)] = (off, meta, le)
        elif kind == "toff":
            g = self._group(entry["g"])
            pend = g.pending.setdefault(entry["pid"], {})
            for t, p, off, meta, le in entry["o"]:
                pend[(t, p)] = (off, meta, le)
        elif kind == "toff_end":
            self._finish_pending(entry["g"], entry["pid"], entry["c"])
        elif kind == "group_del":
            self.groups.pop(entry["g"], None)
        else:
            return False
        return True

    def snapshot(self) -> list[Entry]:
        """Journal entries recreating offsets (membership is not persisted)."""
        out: list[Entry] = []
        for g in self.groups.values():
            if g.offsets:
                out.append({"t": "off", "g": g.group_id, "o": _pack(g.offsets)})
            for pid, pend in g.pending.items():
                out.append({"t": "toff", "g": g.group_id, "pid": pid, "o": _pack(pend)})
        return out

    def _group(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            g = Group(group_id)
            self.groups[group_id] = g
        return g

    # ---- offsets -----------------------------------------------------------------
    def check_member(self, group_id: str, member_id: str, generation: int) -> ErrorCode:
        """Validate the member/generation of an offset commit."""
        g = self.groups.get(group_id)
        if generation < 0:
            if g is not None and g.members:
                return ErrorCode.unknown_member_id
            return ErrorCode.none
        if g is None or member_id not in g.members:
            return ErrorCode.unknown_member_id
        if generation != g.generation:
            return ErrorCode.illegal_generation
        if g.state == COMPLETING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def commit(self, group_id: str, offsets: dict[TopicPartition, OffsetValue]) -> None:
        """Store plain committed offsets."""
        g = self._group(group_id)
        self.broker.journal.append({"t": "off", "g": group_id, "o": _pack(offsets)})
        g.offsets.update(offsets)

    def commit_pending(
        self, group_id: str, pid: int, offsets: dict[TopicPartition, OffsetValue]
    ) -> None:
        """Store transactional offsets, invisible until the transaction commits."""
        g = self._group(group_id)
        self.broker.journal.append({"t": "toff", "g": group_id, "pid": pid, "o": _pack(offsets)})
        g.pending.setdefault(pid, {}).update(offsets)

    def complete_txn(self, group_id: str, pid: int, commit: bool) -> None:
        """Apply (commit) or drop (abort) a producer's pending offsets."""
        self.broker.journal.append({"t": "toff_end", "g": group_id, "pid": pid, "c": commit})
        self._finish_pending(group_id, pid, commit)

    def _finish_pending(self, group_id: str, pid: int, commit: bool) -> None:
        g = self.groups.get(group_id)
        if g is None:
            return
        pend = g.pending.pop(pid, {})
        if commit:
            g.offsets.update(pend)

    def fetch(self, group_id: str, tp: TopicPartition) -> tuple[OffsetValue | None, bool]:
        """Return (committed offset or None, whether a transactional commit is pending)."""
        g = self.groups.get(group_id)
        if g is None:
            return None, False
        unstable = any(tp in pend for pend in g.pending.values())
        return g.offsets.get(tp), unstable

    def committed_partitions(self, group_id: str) -> list[TopicPartition]:
        """Every partition with a committed offset in ``group_id``."""
        g = self.groups.get(group_id)
        return sorted(g.offsets) if g is not None else []

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups for one group."""
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.group_id_not_found
        if g.members:
            return ErrorCode.non_empty_group
        self.broker.journal.append({"t": "group_del", "g": group_id})
        del self.groups[group_id]
        return ErrorCode.none

    # ---- membership ------------------------------------------------------------
    async def join(self, req: dict[str, Any]) -> dict[str, Any]:
        """JoinGroup; resolves when the rebalance completes."""
        cfg = self.broker.config
        session = req["session_timeout_ms"]
        if not cfg.group_min_session_timeout_ms <= session <= cfg.group_max_session_timeout_ms:
            return {"error_code": ErrorCode.invalid_session_timeout, "member_id": req["member_id"]}
        g = self._group(req["group_id"])
        if g.members and g.protocol_type and req["protocol_type"] != g.protocol_type:
            return {"error_code": ErrorCode.inconsistent_group_protocol}
        member_id = req["member_id"]
        if member_id and member_id not in g.members:
            return {"error_code": ErrorCode.unknown_member_id, "member_id": member_id}
        if not member_id:
            member_id = f"{req['client_id'] or 'member'}-{uuid.uuid4()}"
        member = g.members.get(member_id)
        if member is None:
            member = Member(
                member_id,
                req["instance_id"],
                req["client_id"],
                req["client_host"],
                session,
                req["rebalance_timeout_ms"],
                req["protocols"],
            )
            g.members[member_id] = member
        else:
            member.protocols = req["protocols"]
            member.session_timeout_ms = session
            member.rebalance_timeout_ms = req["rebalance_timeout_ms"]
        g.protocol_type = req["protocol_type"]
        member.last_heartbeat = time.monotonic()
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result({"error_code": ErrorCode.rebalance_in_progress})
        member.join_future = fut
        if g.state != PREPARING:
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return await fut

    def _prepare_rebalance(self, g: Group) -> None:
        now = time.monotonic()
        was_empty = g.state == EMPTY
        g.state = PREPARING
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.join_deadline = now + timeout / 1000
        delay = self.broker.config.group_initial_rebalance_delay_ms if was_empty else 0
        g.earliest_completion = now + delay / 1000
        for m in g.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result({"error_code": ErrorCode.rebalance_in_progress})
            m.sync_future = None

    def _maybe_complete_join(self, g: Group, *, force: bool = False) -> None:
        if g.state != PREPARING:
            return
        now = time.monotonic()
        all_joined = all(m.join_future is not None for m in g.members.values())
        if not ((all_joined and now >= g.earliest_completion) or force or now >= g.join_deadline):
            return
        for mid in [mid for mid, m in g.members.items() if m.join_future is None]:
            log.info("group %s: member %s did not rejoin in time, removed", g.group_id, mid)
            del g.members[mid]
        g.generation += 1
        if not g.members:
            g.state, g.leader, g.protocol_name = EMPTY, None, None
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
            g.state = EMPTY
            return
        g.protocol_name = common[0]
        g.state = COMPLETING
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

    @staticmethod
    def _resolve_join(m: Member, resp: dict[str, Any]) -> None:
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(resp)
        m.join_future = None
        m.last_heartbeat = time.monotonic()

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
        member.last_heartbeat = time.monotonic()
        ok = {"protocol_type": g.protocol_type, "protocol_name": g.protocol_name}
        if g.state == STABLE:
            return {"error_code": ErrorCode.none, "assignment": member.assignment, **ok}
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        member.sync_future = fut
        if member_id == g.leader:
            for m in g.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            g.state = STABLE
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
        g.members[member_id].last_heartbeat = time.monotonic()
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
        now = time.monotonic()
        for g in list(self.groups.values()):
            for mid, m in list(g.members.items()):
                if m.join_future is None and now - m.last_heartbeat > m.session_timeout_ms / 1000:
                    log.info("group %s: member %s session expired", g.group_id, mid)
                    self._remove(g, mid)
            self._maybe_complete_join(g)

    def describe(self, group_id: str) -> dict[str, Any]:
        """DescribeGroups entry of one group."""
        g = self.groups.get(group_id)
        if g is None:
            return {
                "error_code": ErrorCode.none,
                "group_id": group_id,
                "group_state": DEAD,
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
            }
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": dict(m.protocols).get(g.protocol_name or "", b""),
                "member_assignment": m.assignment,
            }
            for m in g.members.values()
        ]
        return {
            "error_code": ErrorCode.none,
            "group_id": group_id,
            "group_state": g.state,
            "protocol_type": g.protocol_type,
            "protocol_data": g.protocol_name or "",
            "members": members,
        }


def _pack(offsets: dict[TopicPartition, OffsetValue]) -> list[list[Any]]:
    return [[t, p, off, meta, le] for (t, p), (off, meta, le) in offsets.items()]
