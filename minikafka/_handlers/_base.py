"""Handler registry shared by the handler modules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

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


def stage_offsets(
    broker: Any, req: Any, code: ErrorCode
) -> tuple[dict[tuple[str, int], tuple[int, str | None, int]], list[Data]]:
    """Check an offset commit's partitions; return the offsets to store and the answer topics.

    Partitions that do not exist get UNKNOWN_TOPIC_OR_PARTITION (as Kafka answers); with a
    request-level ``code`` every partition gets that code and nothing is staged.
    """
    staged: dict[tuple[str, int], tuple[int, str | None, int]] = {}
    topics: list[Data] = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            pcode = code
            if pcode == ErrorCode.none and broker.topics.partition(t.name, p.partition_index) is None:
                pcode = ErrorCode.unknown_topic_or_partition
            if pcode == ErrorCode.none:
                staged[(t.name, p.partition_index)] = (
                    p.committed_offset,
                    p.committed_metadata,
                    getattr(p, "committed_leader_epoch", -1),
                )
            parts.append({"partition_index": p.partition_index, "error_code": pcode})
        topics.append({"name": t.name, "partitions": parts})
    return staged, topics
