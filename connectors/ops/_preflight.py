"""``eos preflight``: what a cluster must offer a sink before it starts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from connectors.kafka import DEFAULT_EPOCH_LOG_TOPIC, DEFAULT_MARKER_TOPIC, _client
from connectors.kafka._client import (
    Cluster,
    DurabilityRules,
    admin_client,
    broker_config,
    existing_topics,
    required_acls,
)
from connectors.kafka._sink._config import DEFAULT_PRODUCER_LANES
from connectors.ops._result import OK, PROBLEM, Result


@dataclass(frozen=True, kw_only=True)
class SinkPlan:
    """What ``eos preflight`` checks for a sink not started yet (its options)."""

    topics: list[str]
    sink_id: str | None = None
    parallelism: int = 2
    transaction_timeout_ms: int = 60_000
    epoch_log_topic: str = DEFAULT_EPOCH_LOG_TOPIC
    marker_topic: str = DEFAULT_MARKER_TOPIC
    producer_lanes: int = DEFAULT_PRODUCER_LANES
    strict: bool = False


def preflight(cluster: Cluster, plan: SinkPlan) -> Result:
    """``eos preflight``: reachable, topics, timeouts, durability, the names and ACLs of a sink.

    Durability (``DurabilityRules``, on the existing topics and the transaction state log):
    each finding is a line of ``warnings``, and a problem (exit 1) with ``plan.strict``.
    """
    topics, sink_id, parallelism = plan.topics, plan.sink_id, plan.parallelism
    transaction_timeout_ms, lanes = plan.transaction_timeout_ms, plan.producer_lanes
    admin = admin_client(cluster)
    present = existing_topics(admin)
    missing = [t for t in topics if t not in present]
    raw = broker_config(cluster, "transaction.max.timeout.ms")
    limit = None if raw is None else int(raw)
    problems = [f"topic {t!r} does not exist" for t in missing]
    if limit is not None and transaction_timeout_ms > limit:
        problems.append(
            f"transaction_timeout_ms={transaction_timeout_ms} exceeds the broker's "
            f"transaction.max.timeout.ms={limit}"
        )
    warnings = [f.line() for f in DurabilityRules().check(admin, set(topics) & set(present))]
    if plan.strict:
        problems += warnings
    data: dict[str, Any] = {
        "broker": "reachable",
        "warnings": warnings,
        "topics": {t: t in present for t in topics},
        "transaction_timeout_ms": transaction_timeout_ms,
        "transaction_max_timeout_ms": limit,
    }
    if sink_id is not None:
        data["names"] = {
            "transactional_ids": _client.lane_ids(sink_id, range(parallelism), lanes),
            "marker_groups": [_client.marker_group(sink_id, p) for p in range(parallelism)],
            "epoch_log_coordinator_id": _client.coordinator_id(sink_id),
        }
        acls = required_acls(
            sink_id,
            topics,
            epoch_log_topic=plan.epoch_log_topic,
            marker_topic=plan.marker_topic,
        )
        data["acls"] = [asdict(a) | {"operations": list(a.operations)} for a in acls]
    cause = "the cluster is not ready for the sink (the problems above)" if problems else ""
    return Result(data=data, code=PROBLEM if problems else OK, problems=problems, cause=cause)
