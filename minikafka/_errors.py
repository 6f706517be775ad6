"""Exception hierarchy of minikafka.

Every error the broker raises internally derives from :class:`MiniKafkaError`.
Errors that map to a Kafka protocol error code carry it in ``error_code`` so
handlers can answer the client with the right code instead of crashing.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class MiniKafkaError(Exception):
    """Base class of every minikafka error."""


class BrokerConfigError(MiniKafkaError):
    """A broker setting is invalid; the message names the setting and the fix."""


class ProtocolError(MiniKafkaError):
    """A request frame could not be understood (malformed, unknown API or version)."""


class KafkaProtocolError(MiniKafkaError):
    """A request was understood but must be answered with a Kafka error code.

    ``error_code`` is the code; ``corrupt_message`` is a record batch that failed its
    header or CRC32C check. Both arguments are the exception's ``args``, so it pickles by
    the default protocol.
    """

    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(error_code, message)
        self.error_code = error_code

    def __str__(self) -> str:
        return str(self.args[1]) or self.error_code.name


class StorageError(MiniKafkaError):
    """A file in the data directory is unreadable in a way recovery cannot repair."""


class BrokerStartError(MiniKafkaError):
    """The broker (embedded or subprocess) did not start listening."""
