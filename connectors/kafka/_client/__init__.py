"""The Kafka client layer: the one way the kit reaches a Kafka cluster.

The sink, the source, ``eos`` (``connectors.ops``), the checker (``connectors.verify``)
and the demo import this package, never its modules (tests/test_layering.py checks it).
What it promises them:

* **Clients.** Every confluent-kafka Producer, Consumer and AdminClient of ``connectors``
  is built by :func:`producer`, :func:`consumer`, :func:`admin_client` (or
  :func:`connect_admin`) from a :class:`Cluster`: the address plus the settings every
  client of one sink, source or command shares. A Cluster is frozen and picklable (it
  travels to Spark tasks) and its repr hides secret values; librdkafka's log lines go to
  the Python logger ``connectors.kafka.librdkafka``, rate-limited and scrubbed.
* **Settings.** :func:`librdkafka_settings` validates a user's ``client_config`` /
  ``producer_config`` at construction, without network I/O, refusing every setting the
  kit owns; :func:`cluster_of` builds the Cluster; :func:`kafka_options` gives the
  source's ``kafka.*`` options. :class:`Settings` holds settings picklable with secrets
  hidden from repr; :func:`scrub` removes secret values from any text (the only
  redaction of the kit).
* **First contact.** :func:`connect_admin` waits at most :data:`CONNECT_WAIT_S` for the
  cluster to answer, or raises ``KafkaAuthenticationError`` / ``KafkaConnectError``
  naming the address and the option to fix.
* **Errors.** :func:`classify` maps any Kafka error to one ``txn.ErrorAction`` (by code
  and librdkafka's flags, never by message); :func:`call_with_retry` retries what is
  retriable within a bound, :func:`retry_over_restart` also over a broker restart (at most
  :data:`BROKER_RESTART_WAIT_S`); :func:`stale_topic_verdict` names a client's stale
  "Unknown topic" verdict after a restart and :class:`TopicRefresher` lifts it (issue 38);
  :func:`to_write_error`, :func:`raise_if_denied` and
  :func:`access_error` turn an exception into the connector's typed error (an
  authorization error names the ACL to grant).
* **Admin.** Topics (:func:`existing_topics`, :func:`wait_for_topic`,
  :func:`ensure_topics`), a broker setting (:func:`broker_config`), the ACLs a sink's
  principal needs (:func:`required_acls`).
* **Durability.** :class:`StateTopicDurability`: the replication and
  ``min.insync.replicas`` of the topics the kit creates for its state;
  :class:`DurabilityRules`: the settings exactly-once needs of an output topic and the
  transaction state log, checked by the sink's preflight and ``eos preflight``
  (:class:`DurabilityFinding` warnings, or a ``PreflightError`` when strict).
* **Names.** What a sink owns on the cluster, derived from its ``sink_id`` once
  (:func:`transactional_id`, :func:`lane_ids`, :func:`marker_group`,
  :func:`coordinator_id`) and the default topics.

Errors raised here are the Kafka connector's (``connectors.kafka._errors``).
"""

from connectors.kafka._client._acls import required_acls
from connectors.kafka._client._admin import (
    TOPIC_METADATA_WAIT_S,
    admin_client,
    broker_config,
    ensure_topics,
    existing_topics,
    wait_for_topic,
)
from connectors.kafka._client._classify import (
    BROKER_RESTART_WAIT_S,
    FATAL,
    PARTITION_EOF,
    TIMED_OUT,
    UNKNOWN_PARTITION,
    UNKNOWN_TOPIC,
    access_error,
    broker_restart,
    call_bounded,
    call_with_retry,
    classify,
    code_of,
    fix_authentication,
    kafka_error_of,
    raise_if_denied,
    retry_over_restart,
    stale_topic_verdict,
    to_write_error,
    with_delivery_cause,
)
from connectors.kafka._client._client_config import (
    ClientConfig,
    cluster_of,
    kafka_options,
    librdkafka_settings,
)
from connectors.kafka._client._clients import (
    BOOTSTRAP,
    Cluster,
    consumer,
    producer,
    unconnected_consumer,
)
from connectors.kafka._client._connect import CONNECT_WAIT_S, connect_admin
from connectors.kafka._client._durability import (
    DurabilityFinding,
    DurabilityRules,
    StateTopicDurability,
)
from connectors.kafka._client._names import (
    DEFAULT_EPOCH_LOG_TOPIC,
    DEFAULT_MARKER_TOPIC,
    coordinator_id,
    lane_ids,
    marker_group,
    transactional_id,
)
from connectors.kafka._client._secrets import Settings, scrub
from connectors.kafka._client._verdict import STALE_REFRESH_S, TopicRefresher

__all__ = [
    "BOOTSTRAP",
    "BROKER_RESTART_WAIT_S",
    "CONNECT_WAIT_S",
    "DEFAULT_EPOCH_LOG_TOPIC",
    "DEFAULT_MARKER_TOPIC",
    "FATAL",
    "PARTITION_EOF",
    "STALE_REFRESH_S",
    "TIMED_OUT",
    "TOPIC_METADATA_WAIT_S",
    "UNKNOWN_PARTITION",
    "UNKNOWN_TOPIC",
    "ClientConfig",
    "Cluster",
    "DurabilityFinding",
    "DurabilityRules",
    "Settings",
    "StateTopicDurability",
    "TopicRefresher",
    "access_error",
    "admin_client",
    "broker_config",
    "broker_restart",
    "call_bounded",
    "call_with_retry",
    "classify",
    "cluster_of",
    "code_of",
    "connect_admin",
    "consumer",
    "coordinator_id",
    "ensure_topics",
    "existing_topics",
    "fix_authentication",
    "kafka_error_of",
    "kafka_options",
    "lane_ids",
    "librdkafka_settings",
    "marker_group",
    "producer",
    "raise_if_denied",
    "required_acls",
    "retry_over_restart",
    "scrub",
    "stale_topic_verdict",
    "to_write_error",
    "transactional_id",
    "unconnected_consumer",
    "wait_for_topic",
    "with_delivery_cause",
]
