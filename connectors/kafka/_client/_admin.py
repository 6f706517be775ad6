"""Admin helpers of the sink's preflight: topics and broker limits (network I/O)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # type: ignore[attr-defined]

from connectors.kafka._client import _clients
from connectors.kafka._client._classify import raise_if_denied
from connectors.kafka._client._clients import Cluster
from connectors.kafka._client._durability import WANTED_REPLICATION, StateTopicDurability
from connectors.kafka._errors import KafkaCode, KafkaConnectorError

# Seconds for one admin request (metadata, create topics, describe configs).
ADMIN_TIMEOUT_S = 30.0
# Seconds a topic missing from the metadata is looked for again before it is reported
# missing: a restarted broker can answer metadata before it has loaded its topics (seen
# with Kafka 2.5); Java producers likewise wait up to max.block.ms (60 s) for a topic.
TOPIC_METADATA_WAIT_S = 30.0
# Seconds between two metadata requests while waiting for a topic.
TOPIC_METADATA_POLL_S = 0.5


def admin_client(cluster: Cluster) -> AdminClient:
    """Return an AdminClient on ``cluster`` whose brokers answered (``_connect``).

    For a first contact (bounded by ``CONNECT_WAIT_S``); the helpers below build plain
    clients, whose requests wait their own timeouts (a restarting broker is waited for).

    Raises:
        KafkaCode.AUTHENTICATION: authentication failed (within seconds, typed).
        KafkaCode.CONNECT: no broker answered.

    """
    # _connect imports the source package, which imports this module: import at call time.
    from connectors.kafka._client._connect import connect_admin

    return connect_admin(cluster)


def _unreachable(exc: KafkaException) -> KafkaConnectorError:
    msg = (
        f"Kafka stopped answering: {exc}; check that the brokers run and are reachable "
        "(the first contact succeeded)"
    )
    return KafkaConnectorError(msg, code=KafkaCode.BROKER_UNAVAILABLE)


def existing_topics(admin: AdminClient) -> dict[str, int]:
    """Return topic name -> partition count, or KafkaCode.PREFLIGHT when the cluster does not answer."""
    try:
        md = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        raise _unreachable(exc) from exc
    return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}


def wait_for_topic(admin: AdminClient, name: str, *, wait_s: float = TOPIC_METADATA_WAIT_S) -> bool:
    """Return whether topic ``name`` shows in fresh metadata within ``wait_s`` seconds.

    Raises:
        KafkaCode.BROKER_UNAVAILABLE: no broker answered (unreachable, as opposed to missing).

    """
    deadline = time.monotonic() + wait_s
    while True:
        if name in existing_topics(admin):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(TOPIC_METADATA_POLL_S)


def broker_count(admin: AdminClient) -> int:
    """Return the number of brokers in the cluster's metadata."""
    try:
        return max(1, len(admin.list_topics(timeout=ADMIN_TIMEOUT_S).brokers))
    except KafkaException as exc:
        raise _unreachable(exc) from exc


def ensure_topics(
    cluster: Cluster,
    names: Iterable[str],
    *,
    partitions: int = 1,
    compacted: bool = False,
    durability: StateTopicDurability | None = None,
) -> None:
    """Create each topic of ``names`` that does not exist yet (already existing is fine).

    With ``durability`` (the kit's state topics) the replication and topic config
    ``min.insync.replicas`` it settles on for the cluster's broker count; without (an
    output or dead-letter topic) ``min(3, brokers)`` replicas and the broker's default
    ``min.insync.replicas``.

    Raises:
        KafkaCode.AUTHORIZATION: an ACL refused the creation (the message names it).
        KafkaCode.PREFLIGHT: another failure to create a topic.

    """
    admin = _clients.admin(cluster)
    missing = sorted(set(names) - set(existing_topics(admin)))
    if not missing:
        return
    brokers = broker_count(admin)
    config = {"cleanup.policy": "compact"} if compacted else {}
    if durability is None:
        replication = min(WANTED_REPLICATION, brokers)
    else:
        replication, min_isr = durability.settle(brokers)
        config["min.insync.replicas"] = str(min_isr)
    futures = admin.create_topics(
        [
            NewTopic(n, num_partitions=partitions, replication_factor=replication, config=config)
            for n in missing
        ],
        request_timeout=ADMIN_TIMEOUT_S,
    )
    for name, fut in futures.items():
        try:
            fut.result(timeout=ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise_if_denied(exc, f"creating topic {name!r}", cluster.config_option)
            msg = f"cannot create topic {name!r}: {exc}; create it yourself or grant CREATE"
            raise KafkaConnectorError(msg, code=KafkaCode.PREFLIGHT) from exc


def broker_config(cluster: Cluster, name: str) -> str | None:
    """Return the value of broker setting ``name`` of one broker (DescribeConfigs); None if unknown."""
    admin = _clients.admin(cluster)
    try:
        md = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
        broker_id = next(iter(md.brokers))
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
        result = admin.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S)
        configs = result[resource].result(timeout=ADMIN_TIMEOUT_S)
    except (KafkaException, StopIteration) as exc:
        raise_if_denied(exc, "reading the broker configuration", cluster.config_option)
        msg = f"cannot read broker configuration ({exc}); DescribeConfigs must be allowed"
        raise KafkaConnectorError(msg, code=KafkaCode.PREFLIGHT) from exc
    entry = configs.get(name)
    return None if entry is None or entry.value is None else str(entry.value)
