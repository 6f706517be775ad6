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
  cluster to answer, or raises ``KafkaCode.AUTHENTICATION`` / ``KafkaCode.CONNECT``
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
  (:class:`DurabilityFinding` warnings, or a ``KafkaCode.PREFLIGHT`` when strict).
* **Names.** What a sink owns on the cluster, derived from its ``sink_id`` once
  (:func:`transactional_id`, :func:`lane_ids`, :func:`marker_group`,
  :func:`coordinator_id`) and the default topics.

Errors raised here are the Kafka connector's (``connectors.kafka._errors``).
"""

from connectors.kafka._client._acls import required_acls as required_acls
from connectors.kafka._client._admin import TOPIC_METADATA_WAIT_S as TOPIC_METADATA_WAIT_S
from connectors.kafka._client._admin import admin_client as admin_client
from connectors.kafka._client._admin import broker_config as broker_config
from connectors.kafka._client._admin import ensure_topics as ensure_topics
from connectors.kafka._client._admin import existing_topics as existing_topics
from connectors.kafka._client._admin import wait_for_topic as wait_for_topic
from connectors.kafka._client._classify import BROKER_RESTART_WAIT_S as BROKER_RESTART_WAIT_S
from connectors.kafka._client._classify import FATAL as FATAL
from connectors.kafka._client._classify import PARTITION_EOF as PARTITION_EOF
from connectors.kafka._client._classify import TIMED_OUT as TIMED_OUT
from connectors.kafka._client._classify import UNKNOWN_PARTITION as UNKNOWN_PARTITION
from connectors.kafka._client._classify import UNKNOWN_TOPIC as UNKNOWN_TOPIC
from connectors.kafka._client._classify import access_error as access_error
from connectors.kafka._client._classify import broker_restart as broker_restart
from connectors.kafka._client._classify import call_bounded as call_bounded
from connectors.kafka._client._classify import call_with_retry as call_with_retry
from connectors.kafka._client._classify import classify as classify
from connectors.kafka._client._classify import code_of as code_of
from connectors.kafka._client._classify import fix_authentication as fix_authentication
from connectors.kafka._client._classify import kafka_error_of as kafka_error_of
from connectors.kafka._client._classify import raise_if_denied as raise_if_denied
from connectors.kafka._client._classify import retry_over_restart as retry_over_restart
from connectors.kafka._client._classify import stale_topic_verdict as stale_topic_verdict
from connectors.kafka._client._classify import to_write_error as to_write_error
from connectors.kafka._client._classify import with_delivery_cause as with_delivery_cause
from connectors.kafka._client._client_config import ClientConfig as ClientConfig
from connectors.kafka._client._client_config import cluster_of as cluster_of
from connectors.kafka._client._client_config import kafka_options as kafka_options
from connectors.kafka._client._client_config import librdkafka_settings as librdkafka_settings
from connectors.kafka._client._clients import BOOTSTRAP as BOOTSTRAP
from connectors.kafka._client._clients import Cluster as Cluster
from connectors.kafka._client._clients import consumer as consumer
from connectors.kafka._client._clients import producer as producer
from connectors.kafka._client._clients import unconnected_consumer as unconnected_consumer
from connectors.kafka._client._connect import CONNECT_WAIT_S as CONNECT_WAIT_S
from connectors.kafka._client._connect import connect_admin as connect_admin
from connectors.kafka._client._durability import DurabilityFinding as DurabilityFinding
from connectors.kafka._client._durability import DurabilityRules as DurabilityRules
from connectors.kafka._client._durability import StateTopicDurability as StateTopicDurability
from connectors.kafka._client._names import DEFAULT_EPOCH_LOG_TOPIC as DEFAULT_EPOCH_LOG_TOPIC
from connectors.kafka._client._names import DEFAULT_MARKER_TOPIC as DEFAULT_MARKER_TOPIC
from connectors.kafka._client._names import coordinator_id as coordinator_id
from connectors.kafka._client._names import lane_ids as lane_ids
from connectors.kafka._client._names import marker_group as marker_group
from connectors.kafka._client._names import transactional_id as transactional_id
from connectors.kafka._client._secrets import Settings as Settings
from connectors.kafka._client._secrets import scrub as scrub
from connectors.kafka._client._verdict import STALE_REFRESH_S as STALE_REFRESH_S
from connectors.kafka._client._verdict import TopicRefresher as TopicRefresher
