"""Handler registry shared by the handler modules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from .._offsets import CommittedOffset, Offsets

if TYPE_CHECKING:
    from .._broker import Broker

Data = dict[str, Any]
Handler = Callable[["RequestContext", Any], "Data | Awaitable[Data] | None"]
ErrorBuilder = Callable[[Any, ErrorCode], Data]


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    broker: Broker
    api_key: int
    version: int
    client_id: str | None
    client_host: str


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One supported API: version range, handler, and an error-response builder."""

    api_key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler
    error_response: ErrorBuilder


API_TABLE: dict[int, ApiSpec] = {}


def top_level_error(_req: Any, code: ErrorCode) -> Data:
    """Error builder for APIs whose response has one top-level error_code."""
    return {"error_code": code}


def register(
    api_key: int, name: str, min_v: int, max_v: int, error: ErrorBuilder = top_level_error
) -> Callable[[Handler], Handler]:
    """Add a handler to :data:`API_TABLE`."""

    def deco(fn: Handler) -> Handler:
        API_TABLE[api_key] = ApiSpec(api_key, name, min_v, max_v, fn, error)
        return fn

    return deco


def per_partition_offsets_error(req: Any, code: ErrorCode) -> Data:
    """Error answer of an offset commit request: ``code`` for every partition asked."""
    return {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
                ],
            }
            for t in req.topics
        ]
    }


def offsets_to_store(
    ctx: RequestContext, req: Any, code: ErrorCode, *, expire_ms: int | None = None
) -> tuple[Offsets, list[Data]]:
    """Check an offset commit's partitions; return the offsets to store and the answer topics.

    Partitions that do not exist get UNKNOWN_TOPIC_OR_PARTITION first (as Kafka answers);
    the others get the request-level ``code``, and only with no error are they stored.
    """
    broker = ctx.broker
    now = broker.clock.wall_ms()
    accepted: Offsets = {}
    topics: list[Data] = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            pcode = code
            if broker.topics.partition(t.name, p.partition_index) is None:
                pcode = ErrorCode.unknown_topic_or_partition
            if pcode == ErrorCode.none:
                accepted[(t.name, p.partition_index)] = CommittedOffset(
                    p.committed_offset,
                    p.committed_metadata,
                    getattr(p, "committed_leader_epoch", -1),
                    now,
                    expire_ms,
                )
            parts.append({"partition_index": p.partition_index, "error_code": pcode})
        topics.append({"name": t.name, "partitions": parts})
    return accepted, topics
