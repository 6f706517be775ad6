"""The generic transactional write stage for Spark: any ``txn.Resource`` as a sink.

A connector supplies a schema check, a :class:`txn.Resource` (with its
:class:`txn.Participant`) and an epoch log (:class:`SinkConnector`, or
:class:`SimpleConnector` from the pieces); :class:`TransactionalSink` turns it into a
``foreachBatch`` callable and owns the rest: content-hash routing into ``P`` pinned
partitions, row checksums, ``mapInArrow`` with or without a barrier, the vote channel,
stage retries, recovery at start-up and slot checks. The Kafka sink
(``connectors.kafka.KafkaSink``) is built this way. The protocol: docs/architecture.md.
"""

from connectors.stage._backchannel import BackChannel, StageEvent, StageRun
from connectors.stage._bad_records import (
    ERROR_CLASS_COLUMN,
    ERROR_MESSAGE_COLUMN,
    BadRow,
    Classifier,
    DeadLetterContext,
    bad_batch,
    drop_rows,
    screened,
)
from connectors.stage._binding import QUERY_ID_PROPERTY, query_id_of, start_over_offset
from connectors.stage._composite import CompositeSink
from connectors.stage._connector import SimpleConnector, SinkConnector
from connectors.stage._errors import (
    BadRecordThresholdError,
    CheckpointError,
    InputError,
    InputSchemaError,
    InsufficientSlotsError,
    NotKafkaInputError,
    QueryMismatchError,
    RecordError,
    ResumeError,
    ResumeInputMismatchError,
    SinkInUseError,
    SinkStoppedError,
    SparkConnectError,
    StageError,
    StagePartitioningError,
    VoteChannelError,
    VoteRejectedError,
    VoteTimeoutError,
    rebuild_error,
)
from connectors.stage._hooks import DRIVER_STEPS, TASK_STEPS, StepHooks
from connectors.stage._input import InputSpec
from connectors.stage._listener import MetricsListener, ProgressView, offsets_lag
from connectors.stage._metrics import RECENT_EPOCHS, EpochMetrics, TaskStats
from connectors.stage._options import (
    BAD_RECORD_POLICIES,
    DEFAULT_STAGE_RETRIES,
    DEFAULT_VOTE_CHANNEL,
    VOTE_CHANNELS,
    StageOptions,
    build_config,
)
from connectors.stage._resume import (
    RESUME_FROM_OUTPUT,
    ResumePoint,
    committed_point,
    starting_offsets,
)
from connectors.stage._retry import RetryBound, retry, step_budget
from connectors.stage._rows import HASH_COLUMN, ArrowPartition, RowsConsumedError
from connectors.stage._sink import TransactionalSink
from connectors.stage._slots import TaskSlots, task_slots, wait_for_task_slots
from connectors.stage._task import TaskBound, TaskInfo

__all__ = [
    "BAD_RECORD_POLICIES",
    "DEFAULT_STAGE_RETRIES",
    "ERROR_CLASS_COLUMN",
    "ERROR_MESSAGE_COLUMN",
    "DEFAULT_VOTE_CHANNEL",
    "DRIVER_STEPS",
    "HASH_COLUMN",
    "QUERY_ID_PROPERTY",
    "RECENT_EPOCHS",
    "RESUME_FROM_OUTPUT",
    "TASK_STEPS",
    "VOTE_CHANNELS",
    "ArrowPartition",
    "BackChannel",
    "BadRecordThresholdError",
    "BadRow",
    "Classifier",
    "DeadLetterContext",
    "CheckpointError",
    "CompositeSink",
    "EpochMetrics",
    "InputError",
    "InputSpec",
    "InputSchemaError",
    "InsufficientSlotsError",
    "MetricsListener",
    "NotKafkaInputError",
    "ProgressView",
    "QueryMismatchError",
    "RecordError",
    "ResumeError",
    "ResumeInputMismatchError",
    "ResumePoint",
    "RetryBound",
    "RowsConsumedError",
    "SimpleConnector",
    "SinkConnector",
    "SinkInUseError",
    "SinkStoppedError",
    "SparkConnectError",
    "StageError",
    "StageEvent",
    "StageOptions",
    "StageRun",
    "build_config",
    "committed_point",
    "StagePartitioningError",
    "StepHooks",
    "TaskBound",
    "TaskInfo",
    "TaskSlots",
    "TaskStats",
    "TransactionalSink",
    "VoteChannelError",
    "VoteRejectedError",
    "VoteTimeoutError",
    "offsets_lag",
    "bad_batch",
    "drop_rows",
    "query_id_of",
    "rebuild_error",
    "retry",
    "step_budget",
    "screened",
    "start_over_offset",
    "starting_offsets",
    "task_slots",
    "wait_for_task_slots",
]
