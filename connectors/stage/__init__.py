"""The generic transactional write stage for Spark: any ``txn.Resource`` as a sink.

A connector supplies a schema check, a :class:`txn.Resource` (with its
:class:`txn.Participant`) and an epoch log (:class:`SinkConnector`, or
:class:`SimpleConnector` from the pieces); :class:`TransactionalSink` turns it into a
``foreachBatch`` callable and owns the rest: content-hash routing into ``P`` pinned
partitions, row checksums, ``mapInArrow`` with or without a barrier, the vote channel,
stage retries, recovery at start-up and slot checks. The Kafka sink
(``connectors.kafka.KafkaSink``) is built this way. The protocol: docs/architecture.md.
"""

from connectors.stage._backchannel import BackChannel, StageEvent
from connectors.stage._bad_records import BadRow, Classifier, DeadLetterContext
from connectors.stage._composite import CompositeSink
from connectors.stage._connector import SimpleConnector, SinkConnector
from connectors.stage._errors import StageCode, StageError
from connectors.stage._hooks import StepHooks
from connectors.stage._input import InputSpec
from connectors.stage._listener import MetricsListener
from connectors.stage._metrics import EpochMetrics
from connectors.stage._options import StageOptions, build_config
from connectors.stage._retry import RetryBound, retry, step_budget
from connectors.stage._rows import HASH_COLUMN, ArrowPartition
from connectors.stage._sink import TransactionalSink
from connectors.stage._task import TaskInfo

__all__ = [
    "HASH_COLUMN",
    "ArrowPartition",
    "BackChannel",
    "BadRow",
    "Classifier",
    "CompositeSink",
    "DeadLetterContext",
    "EpochMetrics",
    "InputSpec",
    "MetricsListener",
    "RetryBound",
    "SimpleConnector",
    "SinkConnector",
    "StageCode",
    "StageError",
    "StageEvent",
    "StageOptions",
    "StepHooks",
    "TaskInfo",
    "TransactionalSink",
    "build_config",
    "retry",
    "step_budget",
]
