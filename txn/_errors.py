"""Exception hierarchy of the two-phase-commit core, and the actions errors map to.

Every error says what happened and what to do about it, and its class says whether
running the write stage again can help (:attr:`TxnError.retry_stage`); connectors'
errors derive from these classes and keep that attribute. The tree::

    TxnError
    +-- ConfigError (also a ValueError)      bad option; fix the value named
    +-- IllegalTransitionError               a protocol step out of order
    +-- EpochLogError                        the epoch log cannot be read or written
    |   +-- EpochLogCorruptError             a record is truncated or altered
    |   +-- EpochLogLockedError              another coordinator owns (or took over) the log
    +-- PlanMismatchError                    an in-doubt epoch is replayed with another sink config
    +-- NonDeterministicReplayError          a replayed batch differs from the committed one
    +-- EpochAbortedError                    the epoch could not commit; it stays in doubt
    +-- ParticipantError                     a write partition failed
        +-- PreparedWorkLostError            a decided commit met neither work nor marker
"""

from __future__ import annotations

import enum
from typing import ClassVar


class ErrorAction(str, enum.Enum):
    """What a connector does about an error of its external system (one classifier each).

    * ``RETRY``: transient; repeat the same call a bounded number of times, then ABORT;
    * ``ABORT``: the open transaction cannot commit; abort it and fail the epoch (the
      retry or replay redoes it);
    * ``FATAL``: this client instance is finished (fenced, broken); drop it, never call it
      again, and recreate it for the retry.
    """

    RETRY = "retry"
    ABORT = "abort"
    FATAL = "fatal"


class TxnError(Exception):
    """Base class of every error raised by ``txn`` and by the kit's connectors.

    ``retry_stage`` (a class attribute) says whether running the write stage or the
    epoch again can help: False for errors a re-run would meet again (bad input, a
    replay that differs, a configuration mismatch, a fenced coordinator).
    """

    retry_stage: ClassVar[bool] = True


def can_retry_stage(exc: BaseException) -> bool:
    """Return whether re-running the write stage can help after ``exc``.

    Errors of the kit say so in their class; any other exception (a lost executor, a
    network error) is assumed transient.
    """
    return bool(getattr(type(exc), "retry_stage", True))


class ConfigError(TxnError, ValueError):
    """A configuration value is invalid; the message names the value and the fix."""

    retry_stage = False


class IllegalTransitionError(TxnError):
    """An epoch was asked to move to a state its current state cannot reach.

    This always means a protocol step ran out of order (a bug in a caller, or two
    coordinators sharing one log). The message names the epoch, both states and the
    legal next states.
    """

    retry_stage = False


class EpochLogError(TxnError):
    """The durable epoch log could not be read or written."""


class EpochLogCorruptError(EpochLogError):
    """A record of the epoch log is truncated or altered; the message names the file."""

    retry_stage = False


class EpochLogLockedError(EpochLogError):
    """Another coordinator holds the epoch log (or took it over); stop this one."""

    retry_stage = False


class PlanMismatchError(TxnError):
    """An in-doubt epoch is replayed with a sink configuration other than its plan's."""

    retry_stage = False


class NonDeterministicReplayError(TxnError):
    """A replayed epoch wrote rows other than the ones already committed for it."""

    retry_stage = False


class EpochAbortedError(TxnError):
    """The epoch could not commit on every partition; it stays in doubt for a replay."""


class ParticipantError(TxnError):
    """A write partition (participant) failed; the message names the partition."""


class PreparedWorkLostError(ParticipantError):
    """A logged commit decision met a partition with neither its prepared work nor a marker.

    Raised by ``Resource.commit_prepared``; ``partition`` names the partition. The
    coordinator keeps the commit decision and leaves the partition for the replay, which
    redoes it under a pinned retry plan (docs/architecture.md, "Lost prepared work").
    """

    retry_stage = False

    def __init__(self, message: str, *, partition: int | None = None) -> None:
        super().__init__(message)
        self.partition = partition

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_lost, (type(self), str(self), self.partition))


def _rebuild_lost(
    cls: type[PreparedWorkLostError], message: str, partition: int | None
) -> PreparedWorkLostError:
    return cls(message, partition=partition)


class EpochUnresolvedError(TxnError):
    """An epoch in doubt cannot be settled without the query that planned it.

    Raised when a sink is bound to a new query that will not replay the epoch (resume from
    the output): the epoch committed on some write partitions and not on others, or its
    commit decision lost prepared work. The message names the partitions and the fix.
    """

    retry_stage = False
