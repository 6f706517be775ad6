"""Transaction APIs (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, ...).

Also TxnOffsetCommit, ListTransactions and DescribeProducers.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from .._cluster import TXN_COORDINATOR
from .._protocol import ms
from ._base import Data, RequestContext, offsets_to_store, per_partition_offsets_error, register


@register(22, "InitProducerId", 0, 4)
def init_producer_id(ctx: RequestContext, req: Any) -> Data:
    """Allocate a producer id, or bump the epoch of a transactional id."""
    err, pid, epoch = ctx.broker.txns.init_producer_id(
        req.transactional_id,
        ms(req.transaction_timeout),
        getattr(req, "producer_id", -1),
        getattr(req, "producer_epoch", -1),
        ctx.version,
    )
    return {"error_code": err, "producer_id": pid, "producer_epoch": epoch}


def _add_partitions_error(req: Any, code: ErrorCode) -> Data:
    return {
        "results_by_topic_v3_and_below": [
            {
                "name": t.name,
                "results_by_partition": [
                    {"partition_index": p, "partition_error_code": code} for p in t.partitions
                ],
            }
            for t in req.v3_and_below_topics
        ]
    }


@register(24, "AddPartitionsToTxn", 0, 3, _add_partitions_error)
def add_partitions_to_txn(ctx: RequestContext, req: Any) -> Data:
    """Register partitions with the producer's transaction."""
    parts = [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]
    errors = ctx.broker.txns.add_partitions(
        req.v3_and_below_transactional_id,
        req.v3_and_below_producer_id,
        req.v3_and_below_producer_epoch,
        parts,
        ctx.version,
    )
    return {
        "results_by_topic_v3_and_below": [
            {
                "name": t.name,
                "results_by_partition": [
                    {"partition_index": p, "partition_error_code": errors[(t.name, p)]}
                    for p in t.partitions
                ],
            }
            for t in req.v3_and_below_topics
        ]
    }


@register(25, "AddOffsetsToTxn", 0, 3)
def add_offsets_to_txn(ctx: RequestContext, req: Any) -> Data:
    """Register a consumer group's offsets with the producer's transaction."""
    return {
        "error_code": ctx.broker.txns.add_offsets(
            req.transactional_id, req.producer_id, req.producer_epoch, req.group_id, ctx.version
        )
    }


@register(26, "EndTxn", 0, 3)
def end_txn(ctx: RequestContext, req: Any) -> Data:
    """Commit or abort the producer's transaction."""
    return {
        "error_code": ctx.broker.txns.end_txn(
            req.transactional_id, req.producer_id, req.producer_epoch, req.committed, ctx.version
        )
    }


@register(28, "TxnOffsetCommit", 0, 3, per_partition_offsets_error)
def txn_offset_commit(ctx: RequestContext, req: Any) -> Data:
    """Keep offsets pending until the transaction commits (then they become visible)."""
    b = ctx.broker
    code = b.txns.check_offsets_commit(
        req.transactional_id, req.producer_id, req.producer_epoch, req.group_id, ctx.version
    )
    if code == ErrorCode.none:
        code = b.groups.check_txn_commit(
            req.group_id, getattr(req, "member_id", ""), getattr(req, "generation_id", -1)
        )
    accepted, topics = offsets_to_store(ctx, req, code)
    if accepted:
        b.offsets.add_pending(req.group_id, req.producer_id, accepted)
    return {"topics": topics}


@register(66, "ListTransactions", 0, 0)
def list_transactions(ctx: RequestContext, req: Any) -> Data:
    """List the transactional ids this node coordinates with their state, filtered like Kafka."""
    states = set(req.state_filters)
    pids = set(req.producer_id_filters)
    out = [
        {"transactional_id": m.tid, "producer_id": m.producer_id, "transaction_state": m.state}
        for m in ctx.broker.txns.txns.values()
        if (not states or m.state in states)
        and (not pids or m.producer_id in pids)
        and ctx.coordinates(TXN_COORDINATOR, m.tid)
    ]
    return {"error_code": ErrorCode.none, "transaction_states": out}


@register(61, "DescribeProducers", 0, 0)
def describe_producers(ctx: RequestContext, req: Any) -> Data:
    """Report producer state per partition (epoch, last sequence, open transaction start)."""
    topics = []
    for t in req.topics:
        parts = []
        for idx in t.partition_indexes:
            plog, code = ctx.led_partition(t.name, idx)
            if plog is None:
                parts.append({"partition_index": idx, "error_code": code})
                continue
            parts.append(
                {
                    "partition_index": idx,
                    "error_code": ErrorCode.none,
                    "active_producers": [
                        {
                            "producer_id": pid,
                            "producer_epoch": e.epoch,
                            "last_sequence": e.last_seq,
                            "last_timestamp": -1,
                            "coordinator_epoch": 0,
                            "current_txn_start_offset": plog.ongoing.get(pid, -1),
                        }
                        for pid, e in plog.producers.items()
                    ],
                }
            )
        topics.append({"name": t.name, "partitions": parts})
    return {"topics": topics}
