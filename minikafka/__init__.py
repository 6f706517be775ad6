"""minikafka: a broker speaking the Kafka wire protocol, of one node or a cluster of several.

It implements what exactly-once pipelines need: record batch v2 produce/fetch,
idempotent producers, transactions (markers, LSO, aborted index, timeouts,
transactional offset commits), consumer groups, topic admin and configs, optional
durability in a data directory, TLS and SASL (PLAIN, SCRAM) listeners, several nodes with
partition leaders and coordinators that fail over (client-visible failover, not
replication), fault hooks for chaos tests, and per-API request counters for benchmarks.
See docs/minikafka.md.
"""

from minikafka._faults import ApiKey

from ._config import BrokerConfig
from ._control import NodeOp, node_control
from ._embedded import EmbeddedKafka
from ._errors import BrokerConfigError, BrokerStartError, MiniKafkaError
from ._process import BrokerProcess
from ._security import SASL_MECHANISMS, SECURITY_PROTOCOLS, ListenerSecurity

__all__ = [
    "ApiKey",
    "BrokerConfig",
    "BrokerConfigError",
    "BrokerProcess",
    "BrokerStartError",
    "EmbeddedKafka",
    "ListenerSecurity",
    "MiniKafkaError",
    "NodeOp",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "node_control",
]
