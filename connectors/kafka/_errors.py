"""Exception hierarchy of the Kafka sink.

Every error names what went wrong and what to do about it, and its class says whether
re-running the write stage can help (``retry_stage``, see :class:`txn.TxnError`). Errors
of the protocol come from :mod:`txn` (e.g. ``txn.NonDeterministicReplayError``), errors of
the generic Spark stage from :mod:`connectors.stage` (the vote channel, slots); the input
errors here are both a ``connectors.stage`` input error and a :class:`KafkaSinkError`::

    KafkaSinkError (txn.TxnError)
    +-- KafkaSinkConfigError (txn.ConfigError)        a bad option, raised at construction
    |   +-- ClientConfigError                    a bad client_config (sink, log, checker, eos)
    +-- PreflightError                           the cluster is unusable at the first write
    |   +-- BrokerUnavailableError               no broker answered
    |       +-- KafkaConnectError                first contact failed (``_connect``; also a source error)
    |           +-- KafkaAuthenticationError     authentication failed (also a KafkaWriteError)
    |   +-- TopicMissingError                    the output topic is not in fresh metadata
    +-- KafkaInputError (connectors.stage.InputError)  the DataFrame cannot be written
    |   +-- KafkaInputSchemaError                a column missing or mistyped (driver)
    |   +-- KafkaRecordError                     one record cannot be written (task)
    |       +-- RecordTooLargeError              over the message size limit
    +-- KafkaWriteError                          Kafka refused a call; ``action`` says why
    |   +-- ProducerFencedError                  a newer instance of the transactional id
    |   +-- KafkaAuthorizationError              an ACL refused the call (fatal; names the ACL)
    |   +-- KafkaAuthenticationError             (also under KafkaConnectError above)
    +-- MarkerError                              a marker group holds an offset the sink did not write
    +-- KafkaEpochLogFencedError (txn.EpochLogLockedError)  another coordinator took the log over
"""

from __future__ import annotations

from connectors.kafka._source._errors import KafkaUnavailableError
from connectors.stage import InputError, InputSchemaError, RecordError
from connectors.stage._errors import rebuild_error
from txn import ConfigError, EpochLogLockedError, ErrorAction, TxnError


class KafkaSinkError(TxnError):
    """Base class of every error raised by the Kafka sink."""


class KafkaSinkConfigError(KafkaSinkError, ConfigError):
    """A sink option is invalid (raised at construction, before any network I/O)."""


class ClientConfigError(KafkaSinkConfigError):
    """``client_config`` (what every Kafka client of the kit shares) is invalid.

    Raised before any network I/O by the sink, ``KafkaEpochLog``, ``read_markers``, the
    checker and ``eos``; the message names the setting and what to use instead.
    """


class PreflightError(KafkaSinkError):
    """The first write found the cluster unusable (topic missing, bad limits)."""


class BrokerUnavailableError(PreflightError):
    """No broker answered within the bounded wait: check the address and the broker."""


class TopicMissingError(PreflightError):
    """The output topic stayed absent from fresh metadata for the bounded wait."""

    retry_stage = False


class KafkaInputError(KafkaSinkError, InputError):
    """The DataFrame handed to the sink cannot be written; the message names the column."""


class KafkaInputSchemaError(KafkaInputError, InputSchemaError):
    """A column is missing or has a type the sink cannot write (detected on the driver)."""


class KafkaRecordError(KafkaInputError, RecordError):
    """One record cannot be written (null where a value is required, unknown op, ...)."""


class RecordTooLargeError(KafkaRecordError):
    """A record exceeds the producer's or the broker's message size limit."""


class KafkaWriteError(KafkaSinkError):
    """Kafka refused a call; ``action`` is how the one classifier classified it."""

    def __init__(self, message: str, *, action: ErrorAction, code: int | None = None) -> None:
        super().__init__(message)
        self.action = ErrorAction(action)
        self.code = code

    def __reduce__(self) -> tuple[object, ...]:
        return (rebuild_error, (type(self), str(self), {"action": self.action, "code": self.code}))


class ProducerFencedError(KafkaWriteError):
    """A newer instance of the same transactional id exists; this producer must stop."""


class MarkerError(KafkaSinkError):
    """A marker group holds an offset this sink did not write (another application uses it)."""

    retry_stage = False


class KafkaEpochLogFencedError(KafkaSinkError, EpochLogLockedError):
    """Another coordinator took over the sink's Kafka epoch log (a second driver runs)."""


class KafkaAuthorizationError(KafkaWriteError):
    """An ACL refused a call (topic, group, transactional id, cluster): grant what it names.

    ``action`` is FATAL: retrying cannot help until the ACL exists; the query stops.
    """

    retry_stage = False

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message, action=ErrorAction.FATAL, code=code)

    def __reduce__(self) -> tuple[object, ...]:
        return (rebuild_error, (type(self), str(self), {"code": self.code}))


class KafkaConnectError(BrokerUnavailableError, KafkaUnavailableError):
    """The first contact with the cluster failed: wrong address, refused, or no answer.

    Raised by the sink's preflight and by the source alike (it is both a
    :class:`BrokerUnavailableError` and the source's ``KafkaUnavailableError``);
    ``address`` is the bootstrap address tried and ``setting`` the option that holds it.
    """

    retry_stage = False

    def __init__(self, message: str, *, address: str = "", setting: str = "") -> None:
        super().__init__(message)
        self.address = address
        self.setting = setting

    def __reduce__(self) -> tuple[object, ...]:
        return (
            rebuild_error,
            (type(self), str(self), {"address": self.address, "setting": self.setting}),
        )


class KafkaAuthenticationError(KafkaConnectError, KafkaWriteError):
    """Authentication failed (SASL or TLS): fix the security settings the message names.

    Raised at the first contact (the sink's preflight, the source, ``eos``) and by the one
    classifier for a call that failed so (``action`` FATAL): retrying with the same
    settings cannot help, so the query stops instead of retrying. ``setting`` names the
    option holding the security settings (``client_config``, the source's ``kafka.*``
    options, ``--command-config``); ``code`` is librdkafka's error code.
    """

    retry_stage = False

    def __init__(
        self, message: str, *, address: str = "", setting: str = "", code: int | None = None
    ) -> None:
        Exception.__init__(self, message)
        self.address = address
        self.setting = setting
        self.action = ErrorAction.FATAL
        self.code = code

    def __reduce__(self) -> tuple[object, ...]:
        fields = {"address": self.address, "setting": self.setting, "code": self.code}
        return (rebuild_error, (type(self), str(self), fields))
