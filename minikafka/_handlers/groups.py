"""Consumer group APIs: membership (classic protocol) and offsets."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from .._cluster import GROUP_COORDINATOR
from .._protocol import ms
from ._base import Data, RequestContext, offsets_to_store, per_partition_offsets_error, register


@register(11, "JoinGroup", 0, 5)
async def join_group(ctx: RequestContext, req: Any) -> Data:
    """Join (or rejoin) a group; answered when the rebalance completes."""
    session = ms(req.session_timeout)
    resp = await ctx.broker.groups.join(
        {
            "group_id": req.group_id,
            "member_id": req.member_id,
            "instance_id": getattr(req, "group_instance_id", None),
            "client_id": ctx.client_id or "",
            "client_host": ctx.client_host,
            "session_timeout_ms": session,
            "rebalance_timeout_ms": ms(getattr(req, "rebalance_timeout", session)),
            "protocol_type": req.protocol_type,
            "protocols": [(p.name, p.metadata) for p in req.protocols],
        }
    )
    resp.setdefault("generation_id", -1)
    resp.setdefault("member_id", req.member_id)
    return resp


@register(14, "SyncGroup", 0, 3)
async def sync_group(ctx: RequestContext, req: Any) -> Data:
    """Leader hands out assignments; every member receives its own."""
    return await ctx.broker.groups.sync(
        req.group_id,
        req.member_id,
        req.generation_id,
        {a.member_id: a.assignment for a in req.assignments},
    )


@register(12, "Heartbeat", 0, 3)
def heartbeat(ctx: RequestContext, req: Any) -> Data:
    """Keep a member alive; tells it when to rejoin."""
    return {
        "error_code": ctx.broker.groups.heartbeat(req.group_id, req.member_id, req.generation_id)
    }


@register(13, "LeaveGroup", 0, 3)
def leave_group(ctx: RequestContext, req: Any) -> Data:
    """Remove members from a group."""
    if ctx.version < 3:
        errors = ctx.broker.groups.leave(req.group_id, [req.member_id])
        return {"error_code": errors[req.member_id]}
    ids = [m.member_id for m in req.members]
    errors = ctx.broker.groups.leave(req.group_id, ids)
    return {
        "error_code": ErrorCode.none,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "error_code": errors[m.member_id],
            }
            for m in req.members
        ],
    }


@register(8, "OffsetCommit", 2, 7, per_partition_offsets_error)
def offset_commit(ctx: RequestContext, req: Any) -> Data:
    """Commit offsets of a group member, or of a consumer without group management."""
    b = ctx.broker
    code = b.groups.check_commit(req.group_id, req.member_id, req.generation_id_or_member_epoch)
    expire_ms = None
    retention_ms = ms(getattr(req, "retention_time", None)) if ctx.version <= 4 else -1
    if retention_ms >= 0:  # v2-v4 may ask for its own retention; -1 means the broker's
        expire_ms = b.clock.wall_ms() + retention_ms
    accepted, topics = offsets_to_store(ctx, req, code, expire_ms=expire_ms)
    if accepted:
        b.offsets.commit(req.group_id, accepted)
    return {"topics": topics}


def _offset_fetch_error(req: Any, code: ErrorCode) -> Data:
    return {
        "error_code": code,
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p, "error_code": code, "committed_offset": -1}
                    for p in t.partition_indexes
                ],
            }
            for t in (req.topics or ())
        ],
    }


@register(9, "OffsetFetch", 1, 7, _offset_fetch_error)
def offset_fetch(ctx: RequestContext, req: Any) -> Data:
    """Return committed offsets; with require_stable, pending transactional ones are UNSTABLE."""
    offsets = ctx.broker.offsets
    require_stable = getattr(req, "require_stable", False)
    if req.topics is None:
        wanted: dict[str, list[int]] = {}
        for t, p in offsets.partitions(req.group_id):
            wanted.setdefault(t, []).append(p)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in req.topics}
    topics = []
    for name, indexes in wanted.items():
        parts = []
        for idx in indexes:
            value, unstable = offsets.fetch(req.group_id, (name, idx))
            out: Data = {
                "partition_index": idx,
                "committed_offset": -1,
                "committed_leader_epoch": -1,
                "metadata": "",
                "error_code": ErrorCode.none,
            }
            if require_stable and unstable:
                out["error_code"] = ErrorCode.unstable_offset_commit
            elif value is not None:
                out["committed_offset"] = value.offset
                out["metadata"] = value.metadata
                out["committed_leader_epoch"] = value.leader_epoch
            parts.append(out)
        topics.append({"name": name, "partitions": parts})
    return {"error_code": ErrorCode.none, "topics": topics}


def _describe_groups_error(req: Any, code: ErrorCode) -> Data:
    return {
        "groups": [{"group_id": g, "error_code": code, "group_state": "Dead"} for g in req.groups]
    }


def _describe_group(ctx: RequestContext, group_id: str) -> Data:
    groups = ctx.broker.groups
    summary = groups.summary(group_id)
    members = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "member_metadata": dict(m.protocols).get(summary.protocol_name, b""),
            "member_assignment": m.assignment,
        }
        for m in groups.members(group_id)
    ]
    return {
        "error_code": ErrorCode.none,
        "group_id": group_id,
        "group_state": summary.state,
        "protocol_type": summary.protocol_type,
        "protocol_data": summary.protocol_name,
        "members": members,
    }


@register(15, "DescribeGroups", 0, 4, _describe_groups_error)
def describe_groups(ctx: RequestContext, req: Any) -> Data:
    """State, protocol and members of groups (``Dead`` for an unknown group).

    A group this node does not coordinate (or whose coordinator loads) gets that error.
    """
    out = []
    for g in req.groups:
        code = ctx.coordinator_error(GROUP_COORDINATOR, g)
        if code is None:
            out.append(_describe_group(ctx, g))
        else:
            out.append({"group_id": g, "error_code": code, "group_state": "Dead"})
    return {"groups": out}


@register(16, "ListGroups", 0, 4)
def list_groups(ctx: RequestContext, req: Any) -> Data:
    """List the groups this node coordinates with members or offsets (offsets-only: type "").

    Each node lists its own groups, as on Kafka (admin clients ask every node).
    """
    wanted = set(getattr(req, "states_filter", ()) or ())
    out = [
        {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state}
        for g in ctx.broker.groups.list_groups()
        if (not wanted or g.state in wanted) and ctx.coordinates(GROUP_COORDINATOR, g.group_id)
    ]
    return {"error_code": ErrorCode.none, "groups": out}


def _delete_groups_error(req: Any, code: ErrorCode) -> Data:
    return {"results": [{"group_id": g, "error_code": code} for g in req.groups_names]}


@register(42, "DeleteGroups", 0, 2, _delete_groups_error)
def delete_groups(ctx: RequestContext, req: Any) -> Data:
    """Delete groups without members, and their offsets."""
    results = []
    for g in req.groups_names:
        code = ctx.broker.cluster.coordinator_error(GROUP_COORDINATOR, g, ctx.node_id, write=True)
        results.append({"group_id": g, "error_code": code or ctx.broker.groups.delete(g)})
    return {"results": results}
