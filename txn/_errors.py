"""Exception hierarchy of the two-phase-commit core.

Every error says what happened and what to do about it. The tree::

    TxnError
    +-- ConfigError (also a ValueError)      bad option; fix the value named
    +-- IllegalTransitionError               a protocol step out of order
    +-- EpochLogError                        the epoch log cannot be read or written
    |   +-- EpochLogCorruptError             a record is truncated or altered
    |   +-- EpochLogLockedError              another coordinator owns the log
    +-- PlanMismatchError                    an in-doubt epoch is replayed with another sink config
    +-- NonDeterministicReplayError          a replayed batch differs from the committed one
    +-- EpochAbortedError                    the epoch could not commit; it stays in doubt
    +-- ParticipantError                     a write partition failed
"""

from __future__ import annotations


class TxnError(Exception):
    """Base class of every error raised by ``txn``."""


class ConfigError(TxnError, ValueError):
    """A configuration value is invalid; the message names the value and the fix."""


class IllegalTransitionError(TxnError):
    """An epoch was asked to move to a state its current state cannot reach.

    This always means a protocol step ran out of order (a bug in a caller, or two
    coordinators sharing one log). The message names the epoch, both states and the
    legal next states.
    """


class EpochLogError(TxnError):
    """The durable epoch log could not be read or written."""


class EpochLogCorruptError(EpochLogError):
    """A record of the epoch log is truncated or altered; the message names the file."""


class EpochLogLockedError(EpochLogError):
    """Another coordinator holds the epoch log (or took it over); stop this one."""


class PlanMismatchError(TxnError):
    """An in-doubt epoch is replayed with a sink configuration other than its plan's."""


class NonDeterministicReplayError(TxnError):
    """A replayed epoch wrote rows other than the ones already committed for it."""


class EpochAbortedError(TxnError):
    """The epoch could not commit on every partition; it stays in doubt for a replay."""


class ParticipantError(TxnError):
    """A write partition (participant) failed; the message names the partition."""
