"""The ACLs a Kafka sink's principal needs on a cluster with authorization: listed once.

``eos preflight --sink-id`` prints them and docs/deploying.md ("ACLs") explains them; the
one classifier names the relevant one when a call is refused (``_classify``). Each entry
is Kafka's resource type, pattern type (``LITERAL`` or ``PREFIXED``), resource name and
operations, with why the kit needs it:

1. the output topics: WRITE, DESCRIBE (the write tasks' transactional producers),
   DESCRIBE_CONFIGS (the preflight checks their durability settings, ``_durability``);
2. the epoch-log topic: READ, WRITE, DESCRIBE (the coordinator appends and re-reads it);
3. the marker topic: READ, DESCRIBE (markers are offsets committed to it, and read back);
4. the consumer groups ``{sink_id}.``: READ, DESCRIBE (PREFIXED: the marker groups
   ``{sink_id}.marker.{p}`` and the epoch log's reader groups);
5. the transactional ids ``{sink_id}``: WRITE, DESCRIBE (PREFIXED: ``{sink_id}-{p}`` and
   ``{sink_id}.coordinator``);
6. the cluster: DESCRIBE_CONFIGS (the preflight reads ``transaction.max.timeout.ms``),
   IDEMPOTENT_WRITE (brokers before Kafka 3.0 only) and CREATE (only to create missing
   topics: the marker and epoch-log topics, or the output with ``create_topics=True``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from connectors.kafka._client import _names


@dataclass(frozen=True, kw_only=True)
class Acl:
    """One ACL the sink's principal needs (Kafka's resource and pattern types)."""

    resource_type: str
    pattern_type: str
    name: str
    operations: tuple[str, ...]
    why: str


def required_acls(
    sink_id: str,
    topics: Iterable[str],
    *,
    epoch_log_topic: str = _names.DEFAULT_EPOCH_LOG_TOPIC,
    marker_topic: str = _names.DEFAULT_MARKER_TOPIC,
) -> list[Acl]:
    """Return the ACLs sink ``sink_id`` needs to write ``topics`` (module doc)."""
    acls = [
        Acl(
            resource_type="TOPIC",
            pattern_type="LITERAL",
            name=t,
            operations=("WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"),
            why="the write tasks' producers; the preflight checks the topic's durability settings",
        )
        for t in dict.fromkeys(topics)
    ]
    acls += [
        Acl(
            resource_type="TOPIC",
            pattern_type="LITERAL",
            name=epoch_log_topic,
            operations=("READ", "WRITE", "DESCRIBE"),
            why="the Kafka epoch log (appended and re-read by the driver)",
        ),
        Acl(
            resource_type="TOPIC",
            pattern_type="LITERAL",
            name=marker_topic,
            operations=("READ", "DESCRIBE"),
            why="the idempotency markers: offsets committed to this topic in each transaction",
        ),
        Acl(
            resource_type="GROUP",
            pattern_type="PREFIXED",
            name=f"{sink_id}.",
            operations=("READ", "DESCRIBE"),
            why=f"the marker groups {_names.marker_group(sink_id, 0)}, ... and the epoch "
            "log's reader groups",
        ),
        Acl(
            resource_type="TRANSACTIONAL_ID",
            pattern_type="PREFIXED",
            name=sink_id,
            operations=("WRITE", "DESCRIBE"),
            why=f"the write tasks' ids {_names.transactional_id(sink_id, 0)}, ... and the epoch "
            f"log's {_names.coordinator_id(sink_id)}",
        ),
        Acl(
            resource_type="CLUSTER",
            pattern_type="LITERAL",
            name="kafka-cluster",
            operations=("DESCRIBE_CONFIGS",),
            why="the preflight reads transaction.max.timeout.ms (IDEMPOTENT_WRITE too on brokers "
            "before Kafka 3.0; CREATE only to create missing topics)",
        ),
    ]
    return acls
