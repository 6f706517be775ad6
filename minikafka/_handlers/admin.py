"""ApiVersions, Metadata, FindCoordinator, topic administration and configs."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from .._cluster import GROUP_COORDINATOR, TXN_COORDINATOR
from .._errors import KafkaProtocolError
from .._topics import Topic
from ._base import API_TABLE, Data, RequestContext, register

RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
SOURCE_DYNAMIC_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5


def supported_versions() -> list[Data]:
    """ApiVersions entries for every implemented API."""
    return [
        {"api_key": s.api_key, "min_version": s.min_version, "max_version": s.max_version}
        for s in sorted(API_TABLE.values(), key=lambda s: s.api_key)
    ]


@register(18, "ApiVersions", 0, 3)
def api_versions(_ctx: RequestContext, _req: Any) -> Data:
    """Advertise exactly the implemented API versions."""
    return {"error_code": ErrorCode.none, "api_keys": supported_versions()}


def _topic_metadata(ctx: RequestContext, topic: Topic) -> Data:
    nodes = ctx.broker.cluster.nodes
    partitions = []
    for i, ld in enumerate(topic.leaders):
        isr = nodes.in_sync(ld.replicas)
        partitions.append(
            {
                "error_code": ErrorCode.none if ld.leader >= 0 else ErrorCode.leader_not_available,
                "partition_index": i,
                "leader_id": ld.leader,
                "leader_epoch": ld.leader_epoch,
                "replica_nodes": ld.replicas,
                "isr_nodes": isr,
                "offline_replicas": tuple(r for r in ld.replicas if r not in isr),
            }
        )
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": False,
        "partitions": partitions,
    }


def _metadata_error(req: Any, code: ErrorCode) -> Data:
    return {"topics": [{"name": t.name, "error_code": code} for t in (req.topics or ())]}


def _listing(ctx: RequestContext, req: Any) -> bool:
    """Whether a Metadata request asks for every topic (null list; an empty one in v0)."""
    return req.topics is None or (ctx.version == 0 and not req.topics)


def _loading_topics(ctx: RequestContext, req: Any) -> list[Data]:
    """Topics of a Metadata answer while the node "loads" (see BrokerConfig.topic_load_mode)."""
    broker = ctx.broker
    mode = broker.config.topic_load_mode
    listing = _listing(ctx, req)
    names = list(broker.topics.topics) if listing else [rt.name for rt in req.topics]
    if mode == "flap":
        ctx.connection.metadata_answers += 1
        if ctx.connection.metadata_answers == 1:
            return [_leaderless(ctx, n) for n in names]
        return []
    if mode == "empty" or (mode == "hidden" and listing):
        return []
    code = (
        ErrorCode.unknown_topic_or_partition if mode == "hidden" else ErrorCode.leader_not_available
    )
    return [{"name": n, "error_code": code} for n in names]


def _leaderless(ctx: RequestContext, name: str) -> Data:
    """Describe a topic as a node that knows it but none of its partitions' leaders."""
    topic = ctx.broker.topics.get(name)
    if topic is None:
        return {"name": name, "error_code": ErrorCode.unknown_topic_or_partition}
    data = _topic_metadata(ctx, topic)
    for p in data["partitions"]:
        p["error_code"], p["leader_id"] = ErrorCode.leader_not_available, -1
    return data


@register(3, "Metadata", 0, 8, _metadata_error)
def metadata(ctx: RequestContext, req: Any) -> Data:
    """Answer the listed nodes and the requested topics, auto-creating if allowed."""
    broker = ctx.broker
    loaded = broker.topics_loaded(ctx.node_id)
    allow = (
        broker.config.auto_create_topics
        and loaded
        and getattr(req, "allow_auto_topic_creation", True)
    )
    if not loaded:
        topics = _loading_topics(ctx, req)
    elif _listing(ctx, req):
        topics = [_topic_metadata(ctx, t) for t in broker.topics.topics.values()]
    else:
        topics = []
        for rt in req.topics:
            name = rt.name
            topic = broker.topics.get(name)
            if topic is None and allow:
                try:
                    topic = broker.topics.create(name, -1)
                except KafkaProtocolError as exc:
                    topics.append({"name": name, "error_code": exc.error_code})
                    continue
            if topic is None:
                topics.append({"name": name, "error_code": ErrorCode.unknown_topic_or_partition})
            else:
                topics.append(_topic_metadata(ctx, topic))
    cluster = broker.cluster
    return {
        "brokers": [
            {"node_id": n, "host": broker.host, "port": broker.ports[n]}
            for n in cluster.listed_nodes()
        ],
        "cluster_id": broker.config.cluster_id,
        "controller_id": cluster.controller(),
        "topics": topics,
    }


@register(10, "FindCoordinator", 0, 3)
def find_coordinator(ctx: RequestContext, req: Any) -> Data:
    """Point at the leader of the internal partition holding the group or transactional id.

    COORDINATOR_NOT_AVAILABLE while that partition has no leader (Kafka's answer).
    """
    key_type = getattr(req, "key_type", 0)
    if key_type not in (GROUP_COORDINATOR, TXN_COORDINATOR):
        return {"error_code": ErrorCode.invalid_request, "node_id": -1, "host": "", "port": -1}
    b = ctx.broker
    leader = b.cluster.coordinator(key_type, req.key).leader
    if leader < 0:
        return {
            "error_code": ErrorCode.coordinator_not_available,
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    return {
        "error_code": ErrorCode.none,
        "node_id": leader,
        "host": b.host,
        "port": b.ports[leader],
    }


def _create_topics_error(req: Any, code: ErrorCode) -> Data:
    return {"topics": [{"name": t.name, "error_code": code} for t in req.topics]}


@register(19, "CreateTopics", 2, 4, _create_topics_error)
def create_topics(ctx: RequestContext, req: Any) -> Data:
    """Create topics with up to as many replicas as listed nodes (-1: the broker default).

    Explicit replica assignments count for their partitions and replication factor only:
    minikafka places replicas itself (docs/minikafka.md, "Several nodes").
    """
    results = []
    for t in req.topics:
        res: Data = {"name": t.name, "error_code": ErrorCode.none}
        try:
            n, rf = t.num_partitions, t.replication_factor
            if t.assignments:
                n, rf = len(t.assignments), len(t.assignments[0].broker_ids)
            cfg = {c.name: c.value for c in t.configs}
            ctx.broker.topics.create(
                t.name, n, cfg, replication=rf, validate_only=req.validate_only
            )
        except KafkaProtocolError as exc:
            res["error_code"] = exc.error_code
            res["error_message"] = str(exc)
        results.append(res)
    return {"topics": results}


def _delete_topics_error(req: Any, code: ErrorCode) -> Data:
    return {"responses": [{"name": n, "error_code": code} for n in req.topic_names]}


@register(20, "DeleteTopics", 1, 4, _delete_topics_error)
def delete_topics(ctx: RequestContext, req: Any) -> Data:
    """Delete topics and their data."""
    out = []
    for name in req.topic_names:
        code = ErrorCode.none
        try:
            ctx.broker.topics.delete(name)
        except KafkaProtocolError as exc:
            code = exc.error_code
        out.append({"name": name, "error_code": code})
    return {"responses": out}


def _create_partitions_error(req: Any, code: ErrorCode) -> Data:
    return {"results": [{"name": t.name, "error_code": code} for t in req.topics]}


@register(37, "CreatePartitions", 0, 3, _create_partitions_error)
def create_partitions(ctx: RequestContext, req: Any) -> Data:
    """Grow topics' partition counts."""
    out = []
    for t in req.topics:
        res: Data = {"name": t.name, "error_code": ErrorCode.none}
        try:
            ctx.broker.topics.add_partitions(t.name, t.count, validate_only=req.validate_only)
        except KafkaProtocolError as exc:
            res["error_code"] = exc.error_code
            res["error_message"] = str(exc)
        out.append(res)
    return {"results": out}


def broker_configs(ctx: RequestContext) -> dict[str, str]:
    """Broker configs DescribeConfigs reports (Kafka names), as the node that was asked."""
    c = ctx.broker.config
    return {
        "transaction.max.timeout.ms": str(c.transaction_max_timeout_ms),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(
            c.transaction_abort_check_interval_ms
        ),
        "num.partitions": str(c.num_partitions),
        "auto.create.topics.enable": str(c.auto_create_topics).lower(),
        "group.initial.rebalance.delay.ms": str(c.group_initial_rebalance_delay_ms),
        "group.min.session.timeout.ms": str(c.group_min_session_timeout_ms),
        "group.max.session.timeout.ms": str(c.group_max_session_timeout_ms),
        "offsets.retention.minutes": str(c.offsets_retention_ms // 60_000),
        "offsets.retention.check.interval.ms": str(c.offsets_retention_check_interval_ms),
        "message.max.bytes": str(c.max_message_bytes),
        "socket.request.max.bytes": str(c.max_request_bytes),
        "transaction.state.log.replication.factor": str(c.txn_log_replication),
        "transaction.state.log.min.isr": str(c.txn_log_min_isr),
        "transaction.state.log.num.partitions": str(c.transaction_state_num_partitions),
        "offsets.topic.replication.factor": str(c.offsets_log_replication),
        "offsets.topic.num.partitions": str(c.offsets_topic_num_partitions),
        "default.replication.factor": str(c.default_replication_factor),
        "min.insync.replicas": str(c.min_insync_replicas),
        "unclean.leader.election.enable": "false",
        "broker.id": str(ctx.node_id),
    }


def _describe_configs_error(req: Any, code: ErrorCode) -> Data:
    return {
        "results": [
            {"error_code": code, "resource_type": r.resource_type, "resource_name": r.resource_name}
            for r in req.resources
        ]
    }


@register(32, "DescribeConfigs", 1, 4, _describe_configs_error)
def describe_configs(ctx: RequestContext, req: Any) -> Data:
    """Broker and topic configs with their source (default, static or per-topic)."""
    results = []
    for r in req.resources:
        res: Data = {
            "error_code": ErrorCode.none,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "configs": [],
        }
        entries: list[tuple[str, str, int, bool]] = []
        if r.resource_type == RESOURCE_TOPIC:
            topic = ctx.broker.topics.get(r.resource_name)
            if topic is None:
                res["error_code"] = ErrorCode.unknown_topic_or_partition
                res["error_message"] = f"topic {r.resource_name!r} does not exist"
            else:
                for k, default in ctx.broker.topics.defaults.items():
                    explicit = k in topic.configs
                    value = topic.configs.get(k, default)
                    src = SOURCE_DYNAMIC_TOPIC if explicit else SOURCE_DEFAULT
                    entries.append((k, value, src, False))
        elif r.resource_type == RESOURCE_BROKER:
            if r.resource_name not in ("", str(ctx.node_id)):
                res["error_code"] = ErrorCode.invalid_request
                res["error_message"] = f"no broker {r.resource_name!r}"
            else:
                entries = [
                    (k, v, SOURCE_STATIC_BROKER, True) for k, v in broker_configs(ctx).items()
                ]
        else:
            res["error_code"] = ErrorCode.invalid_request
            res["error_message"] = f"unsupported resource type {r.resource_type}"
        keys = set(r.configuration_keys) if r.configuration_keys else None
        res["configs"] = [
            {
                "name": k,
                "value": v,
                "read_only": ro,
                "config_source": src,
                "is_default": src == SOURCE_DEFAULT,
                "is_sensitive": False,
                "synonyms": [],
            }
            for k, v, src, ro in entries
            if keys is None or k in keys
        ]
        results.append(res)
    return {"results": results}


@register(60, "DescribeCluster", 0, 0)
def describe_cluster(ctx: RequestContext, _req: Any) -> Data:
    """Describe the cluster: its listed nodes and the controller Metadata names."""
    b = ctx.broker
    return {
        "error_code": ErrorCode.none,
        "cluster_id": b.config.cluster_id,
        "controller_id": b.cluster.controller(),
        "brokers": [
            {"broker_id": n, "host": b.host, "port": b.ports[n]} for n in b.cluster.listed_nodes()
        ],
    }


def _delete_records_error(req: Any, code: ErrorCode) -> Data:
    return {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "low_watermark": -1, "error_code": code}
                    for p in t.partitions
                ],
            }
            for t in req.topics
        ]
    }


@register(21, "DeleteRecords", 0, 2, _delete_records_error)
def delete_records(ctx: RequestContext, req: Any) -> Data:
    """Advance partitions' log start offsets."""
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            out: Data = {
                "partition_index": p.partition_index,
                "low_watermark": -1,
                "error_code": ErrorCode.none,
            }
            _plog, code = ctx.led_partition(t.name, p.partition_index)
            try:
                if code != ErrorCode.none:
                    raise KafkaProtocolError(code)
                out["low_watermark"] = ctx.broker.topics.delete_records(
                    t.name, p.partition_index, p.offset
                )
            except KafkaProtocolError as exc:
                out["error_code"] = exc.error_code
            parts.append(out)
        topics.append({"name": t.name, "partitions": parts})
    return {"topics": topics}
