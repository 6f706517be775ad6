"""The error of the Kafka connector: sink, source, formats and client layer alike.

One class, :class:`KafkaConnectorError` (a :class:`txn.TxnError`), with a code per case:
a :class:`KafkaCode` for what is Kafka's own, and the core's or the stage's code for a case
they define (a bad option ``txn.TxnCode.CONFIG``, a missing column
``connectors.stage.StageCode.INPUT_SCHEMA``, the epoch log taken over
``txn.TxnCode.EPOCH_LOG_LOCKED``). ``kafka_code`` is librdkafka's or the broker's error
code when Kafka refused a call, ``action`` how the one classifier classified it;
``address`` and ``setting`` name the bootstrap address tried and the option holding it
(or the security settings), never a secret.

The Kafka cases::

    CLIENT_CONFIG              a bad client_config (sink, log, checker, eos)
    PREFLIGHT                  the cluster is unusable at the first write
    BROKER_UNAVAILABLE         no broker answered
    CONNECT                    first contact failed (sink, source, eos alike)
    AUTHENTICATION             the cluster refused the credentials or the TLS handshake
    AUTHORIZATION              an ACL refused the call (fatal; names the ACL)
    TOPIC_MISSING              the output topic is not in fresh metadata
    RECORD_TOO_LARGE           a record over the message size limit
    WRITE                      Kafka refused a call; ``action`` says why
    PRODUCER_FENCED            a newer instance of the transactional id
    MARKER                     a marker group holds an offset the sink did not write
    SCHEMA_REGISTRY_UNAVAILABLE  the registry did not answer on the driver
    SCHEMA_RESOLUTION          the registry refused the schema, or a subject is not planned
    RECORD_FORMAT              a row does not fit the writer schema (or a record its format)
    SOURCE_OPTION              a source option is unknown, malformed or conflicting
    OFFSET_SPEC                startingOffsets / endingOffsets name missing partitions
    DATA_LOSS                  offsets the query needs are gone
    READ_TIMEOUT               reading a planned range made no progress
    UNAVAILABLE                a retriable error persisted through the bounded retries
    SOURCE_FATAL               a non-retriable Kafka error; the client was discarded
    SPARK_VERSION              the installed PySpark is older than the source needs
"""

from __future__ import annotations

from typing import ClassVar

from txn import ErrorAction, ErrorCode, TxnCode, TxnError


class KafkaCode(ErrorCode):
    """The cases of the Kafka connector (see the module docstring)."""

    ERROR = ("kafka", True)
    CLIENT_CONFIG = ("client-config", False)
    PREFLIGHT = ("preflight", True)
    BROKER_UNAVAILABLE = ("broker-unavailable", True)
    CONNECT = ("connect", False)
    AUTHENTICATION = ("authentication", False)
    AUTHORIZATION = ("authorization", False)
    TOPIC_MISSING = ("topic-missing", False)
    RECORD_TOO_LARGE = ("record-too-large", False)
    WRITE = ("write", True)
    PRODUCER_FENCED = ("producer-fenced", True)
    MARKER = ("marker", False)
    SCHEMA_REGISTRY_UNAVAILABLE = ("schema-registry-unavailable", True)
    SCHEMA_RESOLUTION = ("schema-resolution", False)
    RECORD_FORMAT = ("record-format", False)
    SOURCE_OPTION = ("source-option", False)
    OFFSET_SPEC = ("offset-spec", False)
    DATA_LOSS = ("data-loss", False)
    READ_TIMEOUT = ("read-timeout", False)
    UNAVAILABLE = ("unavailable", False)
    SOURCE_FATAL = ("source-fatal", False)
    SPARK_VERSION = ("spark-version", False)


# The cases of a call Kafka refused (``kafka_code`` and ``action`` set by the classifier).
WRITE_CODES = frozenset(
    {KafkaCode.WRITE, KafkaCode.PRODUCER_FENCED, KafkaCode.AUTHORIZATION, KafkaCode.AUTHENTICATION}
)


class KafkaConnectorError(TxnError):
    """The error of :mod:`connectors.kafka`; see the module docstring for the fields."""

    default_code: ClassVar[ErrorCode] = KafkaCode.ERROR

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        action: ErrorAction | None = None,
        column: str | None = None,
        partition: int | None = None,
        kafka_code: int | None = None,
        address: str = "",
        setting: str = "",
    ) -> None:
        super().__init__(message, code=code, action=action, column=column, partition=partition)
        self.kafka_code = kafka_code
        self.address = address
        self.setting = setting


def config_error(message: str) -> KafkaConnectorError:
    """Return the error of an invalid option (``TxnCode.CONFIG``), raised at construction."""
    return KafkaConnectorError(message, code=TxnCode.CONFIG)


def client_config_error(message: str) -> KafkaConnectorError:
    """Return the error of an invalid ``client_config`` (``KafkaCode.CLIENT_CONFIG``)."""
    return KafkaConnectorError(message, code=KafkaCode.CLIENT_CONFIG)
