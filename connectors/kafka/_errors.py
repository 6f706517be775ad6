"""Exception hierarchy of the Kafka sink.

Every error names what went wrong and what to do about it. Errors that belong to the
two-phase-commit protocol come from :mod:`txn` (for example
``txn.NonDeterministicReplayError``); the ones here are specific to Kafka.
"""

from __future__ import annotations

from typing import Any

from txn import ConfigError, EpochLogError, TxnError


class KafkaSinkError(TxnError):
    """Base class of every error raised by :mod:`connectors.kafka`."""


class SinkConfigError(KafkaSinkError, ConfigError):
    """A sink option is invalid (raised at construction, before any network I/O)."""


class InsufficientSlotsError(SinkConfigError):
    """Aligned mode needs every write task of an epoch running at once, and they do not fit."""


class PreflightError(KafkaSinkError):
    """The first write found the cluster unusable (unreachable, topic missing, bad limits)."""


class InputError(KafkaSinkError, ValueError):
    """The DataFrame handed to the sink cannot be written; the message names the column."""

    def __init__(self, message: str, *, column: str | None = None) -> None:
        super().__init__(message)
        self.column = column

    def __reduce__(self) -> tuple[object, ...]:
        # Travels from the write task to the driver pickled; keep the column.
        return (_rebuild, (type(self), str(self), {"column": self.column}))


class InputSchemaError(InputError):
    """A column is missing or has a type the sink cannot write (detected on the driver)."""


class RecordError(InputError):
    """One record cannot be written (null where a value is required, unknown op, ...)."""


class RecordTooLargeError(RecordError):
    """A record exceeds the producer's or the broker's message size limit."""


class KafkaWriteError(KafkaSinkError):
    """Kafka rejected a write; ``action`` says how it was classified."""

    def __init__(self, message: str, *, action: str, code: int | None = None) -> None:
        super().__init__(message)
        self.action = action
        self.code = code

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), str(self), {"action": self.action, "code": self.code}))


class ProducerFencedError(KafkaWriteError):
    """A newer instance of the same transactional id exists; this producer must stop."""


class EpochLogFencedError(KafkaSinkError, EpochLogError):
    """Another coordinator took over the sink's Kafka epoch log (a second driver runs)."""


class VoteChannelError(KafkaSinkError):
    """The driver vote channel failed (unreachable, broken round); the task aborts."""


class VoteTimeoutError(VoteChannelError):
    """Not every write task voted within ``txn.GATHER_TIMEOUT_S``; the round is broken."""


class VoteRejectedError(VoteChannelError):
    """The vote server refused a vote (wrong token, stale stage attempt, conflicting vote)."""


class InjectedFault(KafkaSinkError):  # noqa: N818 - the name is part of the FaultPlan API
    """Raised by a ``FaultPlan`` fault with action "raise" (testing only)."""


def _rebuild(cls: type[Exception], message: str, kwargs: dict[str, Any]) -> Exception:
    """Unpickle an error whose constructor takes keyword-only arguments."""
    return cls(message, **kwargs)
