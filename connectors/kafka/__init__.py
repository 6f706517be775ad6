"""Exactly-once Kafka sink for Spark ``foreachBatch``.

* :class:`KafkaSink` - the sink (exactly-once aligned / unaligned, at-least-once,
  at-most-once); see docs/kafka-sink.md;
* :class:`KafkaEpochLog` - the default epoch log, in a compacted Kafka topic;
* :func:`read_markers` - the idempotency markers of a sink (for checkers);
* :class:`FaultPlan` - fault injection, TESTING ONLY;
* the error hierarchy rooted at :class:`KafkaSinkError` (a ``txn.TxnError``).
"""

from connectors.kafka._classify import ErrorAction, classify
from connectors.kafka._config import DEFAULT_PRODUCER_CONFIG, SinkConfig
from connectors.kafka._epoch_log import KafkaEpochLog
from connectors.kafka._errors import (
    EpochLogFencedError,
    InjectedFault,
    InputError,
    InputSchemaError,
    InsufficientSlotsError,
    KafkaSinkError,
    KafkaWriteError,
    PreflightError,
    ProducerFencedError,
    RecordError,
    RecordTooLargeError,
    SinkConfigError,
    VoteChannelError,
    VoteRejectedError,
    VoteTimeoutError,
)
from connectors.kafka._faults import Fault, FaultPlan
from connectors.kafka._markers import decode_marker, encode_marker, read_markers
from connectors.kafka._sink import KafkaSink

__all__ = [
    "DEFAULT_PRODUCER_CONFIG",
    "EpochLogFencedError",
    "ErrorAction",
    "Fault",
    "FaultPlan",
    "InjectedFault",
    "InputError",
    "InputSchemaError",
    "InsufficientSlotsError",
    "KafkaEpochLog",
    "KafkaSink",
    "KafkaSinkError",
    "KafkaWriteError",
    "PreflightError",
    "ProducerFencedError",
    "RecordError",
    "RecordTooLargeError",
    "SinkConfig",
    "SinkConfigError",
    "VoteChannelError",
    "VoteRejectedError",
    "VoteTimeoutError",
    "classify",
    "decode_marker",
    "encode_marker",
    "read_markers",
]
