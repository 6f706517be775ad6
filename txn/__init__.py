"""Engine-agnostic two-phase-commit core: epoch state machine, durable epoch log, coordinator.

See docs/architecture.md for the protocol. The pieces:

* :class:`EpochState` - the epoch state machine with guarded transitions;
* :class:`Participant` / :class:`Resource` - what a sink implements (task / driver side);
* :class:`EpochLog` / :class:`FileEpochLog` / :class:`EpochHistory` - the write-ahead log;
  :class:`DeferredCompletionLog` writes an epoch's completion with the next plan;
* :func:`run_partition` - the task-side driver; :class:`Coordinator` - the driver side;
* :class:`InProcessExecutor` - runs the write stage in threads, for tests and the demo;
* :class:`CompositeResource` - one epoch across several resources (Kafka and PostgreSQL);
* ``encode_record`` / ``decode_record`` and the lower-level ``seal`` / ``unseal`` /
  ``record_from_body`` / ``corrupt_error`` - the record format, for EpochLog implementations.
"""

from txn._codec import (
    FORMAT_VERSION,
    corrupt_error,
    decode_record,
    encode_record,
    record_from_body,
    seal,
    unseal,
)
from txn._composite import CompositeResource, Member
from txn._coordinator import (
    Coordinator,
    CoordinatorHooks,
    Execute,
)
from txn._deferred import DeferredCompletionLog
from txn._errors import (
    ConfigError,
    EpochAbortedError,
    EpochLogCorruptError,
    EpochLogError,
    EpochLogLockedError,
    EpochUnresolvedError,
    ErrorAction,
    IllegalTransitionError,
    NonDeterministicReplayError,
    ParticipantError,
    PlanMismatchError,
    PreparedWorkLostError,
    TxnError,
    can_retry_stage,
)
from txn._executor import InProcessExecutor, VoteHook
from txn._history import EpochEntry, EpochHistory, check_next_record
from txn._log import DEFAULT_RETAIN_EPOCHS, EpochLog, FileEpochLog
from txn._model import (
    GATHER_TIMEOUT_S,
    CommitMode,
    EpochCompletion,
    EpochDecision,
    EpochPlan,
    Guarantee,
    LogRecord,
    Marker,
    Participant,
    PartitionOutcome,
    PartitionReport,
    QueryBinding,
    Resource,
    RowSummary,
    Vote,
    VoteKind,
)
from txn._offsets import InputOffsets
from txn._outcome import EpochResult, RecoveryReport
from txn._settle import Settlement, deferred_completion, settle_in_doubt
from txn._state import EpochState
from txn._steps import CoordinatorStep, TaskStep
from txn._task import Gather, TaskHooks, run_partition

__all__ = [
    "DEFAULT_RETAIN_EPOCHS",
    "FORMAT_VERSION",
    "GATHER_TIMEOUT_S",
    "CommitMode",
    "CompositeResource",
    "ConfigError",
    "Coordinator",
    "CoordinatorHooks",
    "CoordinatorStep",
    "DeferredCompletionLog",
    "EpochAbortedError",
    "EpochCompletion",
    "EpochDecision",
    "EpochEntry",
    "EpochHistory",
    "EpochLog",
    "EpochLogCorruptError",
    "EpochLogError",
    "EpochLogLockedError",
    "EpochPlan",
    "EpochResult",
    "EpochState",
    "EpochUnresolvedError",
    "ErrorAction",
    "Execute",
    "FileEpochLog",
    "Gather",
    "Guarantee",
    "IllegalTransitionError",
    "InProcessExecutor",
    "InputOffsets",
    "LogRecord",
    "Marker",
    "Member",
    "NonDeterministicReplayError",
    "Participant",
    "ParticipantError",
    "PartitionOutcome",
    "PartitionReport",
    "PlanMismatchError",
    "PreparedWorkLostError",
    "QueryBinding",
    "RecoveryReport",
    "Resource",
    "RowSummary",
    "Settlement",
    "TaskHooks",
    "TaskStep",
    "TxnError",
    "Vote",
    "VoteHook",
    "VoteKind",
    "can_retry_stage",
    "check_next_record",
    "corrupt_error",
    "decode_record",
    "deferred_completion",
    "encode_record",
    "record_from_body",
    "run_partition",
    "seal",
    "settle_in_doubt",
    "unseal",
]
