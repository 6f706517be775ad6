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

from txn._composite import CompositeResource
from txn._coordinator import Coordinator
from txn._errors import ErrorAction, ErrorCode, TxnCode, TxnError, can_retry_stage, has_code
from txn._history import EpochHistory
from txn._log import EpochLog, FileEpochLog
from txn._model import (
    GATHER_TIMEOUT_S,
    CommitMode,
    EpochCompletion,
    EpochPlan,
    Guarantee,
    LogRecord,
    Marker,
    Participant,
    PartitionReport,
    QueryBinding,
    Resource,
    RowSummary,
    Vote,
)
from txn._offsets import InputOffsets
from txn._outcome import EpochResult
from txn._state import EpochState
from txn._steps import CoordinatorStep, TaskStep

__all__ = [
    "GATHER_TIMEOUT_S",
    "can_retry_stage",
    "has_code",
    "CommitMode",
    "CompositeResource",
    "Coordinator",
    "CoordinatorStep",
    "EpochCompletion",
    "EpochHistory",
    "EpochLog",
    "EpochPlan",
    "EpochResult",
    "EpochState",
    "ErrorAction",
    "ErrorCode",
    "FileEpochLog",
    "Guarantee",
    "InputOffsets",
    "LogRecord",
    "Marker",
    "Participant",
    "PartitionReport",
    "QueryBinding",
    "Resource",
    "RowSummary",
    "TaskStep",
    "TxnCode",
    "TxnError",
    "Vote",
]
