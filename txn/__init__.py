"""Engine-agnostic two-phase-commit core: epoch state machine, durable epoch log, coordinator.

See docs/architecture.md for the protocol. The pieces:

* :class:`EpochState` - the epoch state machine with guarded transitions;
* :class:`Participant` / :class:`Resource` - what a sink implements (task / driver side);
* :class:`EpochLog` / :class:`FileEpochLog` / :class:`EpochHistory` - the write-ahead log;
* :func:`run_partition` - the task-side driver; :class:`Coordinator` - the driver side;
* :class:`InProcessChannel` - a thread-based write stage for tests and the demo.
"""

from txn._channel import GATHER_TIMEOUT_S, InProcessChannel, VoteHook
from txn._codec import decode_record, encode_record
from txn._coordinator import (
    Coordinator,
    CoordinatorHooks,
    CoordinatorStep,
    EpochResult,
    Execute,
    RecoveryReport,
)
from txn._errors import (
    ConfigError,
    EpochAbortedError,
    EpochLogCorruptError,
    EpochLogError,
    EpochLogLockedError,
    IllegalTransitionError,
    NonDeterministicReplayError,
    ParticipantError,
    PlanMismatchError,
    TxnError,
)
from txn._history import EpochEntry, EpochHistory, check_next_record
from txn._log import DEFAULT_RETAIN_EPOCHS, EpochLog, FileEpochLog
from txn._model import (
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
    Resource,
    RowSummary,
    Vote,
    VoteKind,
)
from txn._state import EpochState
from txn._task import Gather, TaskHooks, TaskStep, run_partition

__all__ = [
    "DEFAULT_RETAIN_EPOCHS",
    "GATHER_TIMEOUT_S",
    "CommitMode",
    "ConfigError",
    "Coordinator",
    "CoordinatorHooks",
    "CoordinatorStep",
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
    "Execute",
    "FileEpochLog",
    "Gather",
    "Guarantee",
    "IllegalTransitionError",
    "InProcessChannel",
    "LogRecord",
    "Marker",
    "NonDeterministicReplayError",
    "Participant",
    "ParticipantError",
    "PartitionOutcome",
    "PartitionReport",
    "PlanMismatchError",
    "RecoveryReport",
    "Resource",
    "RowSummary",
    "TaskHooks",
    "TaskStep",
    "TxnError",
    "Vote",
    "VoteHook",
    "VoteKind",
    "check_next_record",
    "decode_record",
    "encode_record",
    "run_partition",
]
