"""minikafka: a broker speaking the Kafka wire protocol, of one node or a cluster of several.

It implements what exactly-once pipelines need: record batch v2 produce/fetch,
idempotent producers, transactions (markers, LSO, aborted index, timeouts,
transactional offset commits), consumer groups, topic admin and configs, optional
durability in a data directory, TLS and SASL (PLAIN, SCRAM) listeners, several nodes with
partition leaders and coordinators that fail over (client-visible failover, not
replication), fault hooks for chaos tests, and per-API request counters for benchmarks.
See docs/minikafka.md.
"""

import warnings
from typing import TYPE_CHECKING

from ._config import MAX_REQUEST_BYTES, BrokerConfig
from ._control import NodeOp, NodeOpError, node_control
from ._embedded import EmbeddedKafka
from ._errors import (
    BrokerConfigError,
    BrokerStartError,
    CorruptBatchError,
    KafkaProtocolError,
    MiniKafkaError,
    ProtocolError,
    StorageError,
)
from ._faults import ApiKey, Faults
from ._process import BrokerProcess
from ._security import SASL_MECHANISMS, SECURITY_PROTOCOLS, ListenerSecurity
from ._stats import request_counts

__all__ = [
    "MAX_REQUEST_BYTES",
    "ApiKey",
    "BrokerConfig",
    "BrokerConfigError",
    "BrokerProcess",
    "BrokerStartError",
    "CorruptBatchError",
    "EmbeddedKafka",
    "Faults",
    "KafkaProtocolError",
    "ListenerSecurity",
    "MiniKafkaError",
    "NodeOp",
    "NodeOpError",
    "ProtocolError",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "StorageError",
    "node_control",
    "request_counts",
]

# Former names (docs/upgrading.md): still importable, with a DeprecationWarning. (The kit's
# txn._renamed does the same for txn and connectors; the broker imports neither.)
if TYPE_CHECKING:
    ConfigError = BrokerConfigError
else:

    def __getattr__(name: str) -> object:
        if name != "ConfigError":
            msg = f"module {__name__!r} has no attribute {name!r}"
            raise AttributeError(msg)
        warnings.warn(
            "minikafka.ConfigError is now minikafka.BrokerConfigError (docs/upgrading.md); "
            "the former name will be removed",
            DeprecationWarning,
            stacklevel=2,
        )
        return BrokerConfigError
