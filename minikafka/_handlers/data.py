"""Produce, Fetch and ListOffsets: the data path.

Batches travel as raw bytes end to end: Produce checks each batch's header and
CRC32C and stores it; Fetch returns slices of the stored bytes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from .._cluster import Leadership
from .._errors import KafkaProtocolError
from .._log import PartitionLog
from .._protocol import ms
from .._records import split_batches
from ._base import Data, RequestContext, register

if TYPE_CHECKING:
    from .._topics import Topic

READ_COMMITTED = 1
ACKS_ALL = -1
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def _produce_error(req: Any, code: ErrorCode) -> Data:
    return {
        "responses": [
            {
                "name": t.name,
                "partition_responses": [
                    {
                        "index": p.index,
                        "error_code": code,
                        "base_offset": -1,
                        "log_start_offset": -1,
                    }
                    for p in t.partition_data
                ],
            }
            for t in req.topic_data
        ]
    }


@register(0, "Produce", 3, 8, _produce_error)
def produce(ctx: RequestContext, req: Any) -> Data | None:
    """Append each partition's batches; answer per partition.

    A partition this node does not lead gets NOT_LEADER_OR_FOLLOWER; acks=all with fewer
    in-sync replicas than the topic's ``min.insync.replicas`` gets NOT_ENOUGH_REPLICAS and
    nothing is appended (Kafka checks before appending).
    """
    broker = ctx.broker
    responses = []
    appended = False
    for topic in req.topic_data:
        parts = []
        t = broker.topics.get(topic.name)
        max_bytes = int(t.config("max.message.bytes") or 0) if t is not None else 0
        for pd in topic.partition_data:
            plog, code = ctx.led_partition(topic.name, pd.index)
            resp: Data = {"index": pd.index, "base_offset": -1, "log_start_offset": -1}
            if plog is None or t is None:
                resp["error_code"] = code
            elif req.acks == ACKS_ALL and _below_min_isr(ctx, t.leaders[pd.index], t):
                resp["error_code"] = ErrorCode.not_enough_replicas
            else:
                resp["log_start_offset"] = plog.log_start
                try:
                    resp["base_offset"] = _append(ctx, req, plog, pd.records or b"", max_bytes)
                    resp["error_code"] = ErrorCode.none
                    appended = True
                except KafkaProtocolError as exc:
                    resp["error_code"] = exc.error_code
                    resp["error_message"] = str(exc)
            parts.append(resp)
        responses.append({"name": topic.name, "partition_responses": parts})
    if appended:
        broker.notify_data()
    if req.acks == 0:
        return None
    return {"responses": responses}


def _below_min_isr(ctx: RequestContext, ld: Leadership, topic: Topic) -> bool:
    cluster = ctx.broker.cluster
    isr = cluster.nodes.in_sync(ld.replicas)
    return len(isr) < cluster.min_isr(topic.configs.get("min.insync.replicas"))


def _append(
    ctx: RequestContext, req: Any, plog: PartitionLog, records: bytes, max_bytes: int
) -> int:
    batches = split_batches(records)
    if not batches:
        raise KafkaProtocolError(ErrorCode.invalid_record, "produce request without batches")
    for hdr, _raw in batches:
        if max_bytes and hdr.length > max_bytes:
            raise KafkaProtocolError(
                ErrorCode.message_too_large,
                f"batch of {hdr.length} bytes exceeds max.message.bytes {max_bytes}",
            )
        if hdr.is_transactional:
            if req.transactional_id is None:
                raise KafkaProtocolError(
                    ErrorCode.invalid_record, "transactional batch without transactional.id"
                )
            ctx.broker.txns.verify_produce(
                req.transactional_id,
                hdr.producer_id,
                hdr.producer_epoch,
                plog.topic,
                plog.partition,
            )
    return plog.append(batches)


def _fetch_error(req: Any, code: ErrorCode) -> Data:
    return {
        "error_code": code,
        "responses": [
            {
                "topic": t.topic,
                "partitions": [
                    {"partition_index": p.partition, "error_code": code, "high_watermark": -1}
                    for p in t.partitions
                ],
            }
            for t in req.topics
        ],
    }


@register(1, "Fetch", 4, 11, _fetch_error)
async def fetch(ctx: RequestContext, req: Any) -> Data:
    """Return stored batches, long-polling up to max_wait for min_bytes."""
    deadline = time.monotonic() + ms(req.max_wait) / 1000
    while True:
        data, total, errors = _fetch_once(ctx, req)
        remaining = deadline - time.monotonic()
        if total >= req.min_bytes or errors or remaining <= 0:
            return data
        await ctx.broker.wait_for_data(remaining)


def _fetch_once(ctx: RequestContext, req: Any) -> tuple[Data, int, bool]:
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    budget = getattr(req, "max_bytes", 0x7FFFFFFF)
    total = 0
    errors = False
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            plog, code = ctx.led_partition(t.topic, p.partition)
            if plog is None:
                errors = True
                parts.append(
                    {"partition_index": p.partition, "high_watermark": -1, "error_code": code}
                )
                continue
            hw, lso = plog.high_watermark, plog.lso
            out: Data = {
                "partition_index": p.partition,
                "error_code": ErrorCode.none,
                "high_watermark": hw,
                "last_stable_offset": lso,
                "log_start_offset": plog.log_start,
                "records": b"",
            }
            if committed:
                out["aborted_transactions"] = []
            if p.fetch_offset > hw or p.fetch_offset < plog.log_start:
                errors = True
                out["error_code"] = ErrorCode.offset_out_of_range
            else:
                upper = lso if committed else hw
                limit = (
                    min(p.partition_max_bytes, budget - total) if total else (p.partition_max_bytes)
                )
                records = plog.read(p.fetch_offset, limit, upper) if limit > 0 else b""
                out["records"] = records
                total += len(records)
                if committed and records:
                    out["aborted_transactions"] = [
                        {"producer_id": a.producer_id, "first_offset": a.first_offset}
                        for a in plog.aborted_in_range(p.fetch_offset, upper)
                    ]
            parts.append(out)
        topics.append({"topic": t.topic, "partitions": parts})
    return {"error_code": ErrorCode.none, "session_id": 0, "responses": topics}, total, errors


def _list_offsets_error(req: Any, code: ErrorCode) -> Data:
    return {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": code,
                        "offset": -1,
                        "timestamp": -1,
                    }
                    for p in t.partitions
                ],
            }
            for t in req.topics
        ]
    }


@register(2, "ListOffsets", 1, 7, _list_offsets_error)
def list_offsets(ctx: RequestContext, req: Any) -> Data:
    """Earliest, latest (HW or LSO by isolation level) or by timestamp."""
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            plog, code = ctx.led_partition(t.name, p.partition_index)
            out: Data = {
                "partition_index": p.partition_index,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": 0,
                "error_code": ErrorCode.none,
            }
            if plog is None:
                out["error_code"] = code
            elif p.timestamp == LATEST:
                out["offset"] = plog.lso if committed else plog.high_watermark
            elif p.timestamp == EARLIEST:
                out["offset"] = plog.log_start
            elif p.timestamp == MAX_TIMESTAMP:
                found = plog.max_timestamp_offset()
                if found is not None:
                    out["offset"], out["timestamp"] = found
            else:
                found = plog.offset_for_timestamp(p.timestamp)
                if found is not None:
                    out["offset"], out["timestamp"] = found
            parts.append(out)
        topics.append({"name": t.name, "partitions": parts})
    return {"topics": topics}
