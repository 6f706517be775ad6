"""Exception hierarchy of the read_committed Kafka source.

Every error the source raises on purpose derives from :class:`KafkaSourceError`, so a
caller can catch the whole family with one clause. The subclasses map to what the user
must do:

- :class:`SourceOptionError`: fix the options (raised before any network I/O);
- :class:`OffsetSpecError`: fix ``startingOffsets`` / ``endingOffsets`` so they match the
  topic-partitions that exist (raised when the offsets are resolved against the cluster);
- :class:`DataLossError`: offsets the query needs are gone (retention, deleted records,
  a recreated topic); either restart from a new checkpoint or set ``failOnDataLoss=false``;
- :class:`KafkaReadTimeoutError`: the consumer made no progress for the configured poll
  timeout while reading a planned range;
- :class:`KafkaUnavailableError`: a retriable Kafka error persisted through bounded retries;
- :class:`KafkaSourceFatalError`: a non-retriable Kafka error; the client was discarded;
- :class:`SparkVersionError`: the installed PySpark is older than the source needs.
"""

from __future__ import annotations

__all__ = [
    "DataLossError",
    "KafkaReadTimeoutError",
    "KafkaSourceError",
    "KafkaSourceFatalError",
    "KafkaUnavailableError",
    "OffsetSpecError",
    "SourceOptionError",
    "SparkVersionError",
]


class KafkaSourceError(Exception):
    """Base class of every error the ``kafka-rc`` source raises on purpose."""


class SourceOptionError(KafkaSourceError, ValueError):
    """An option is unknown, malformed, or conflicts with another option."""


class OffsetSpecError(KafkaSourceError, ValueError):
    """Offsets given by the user do not match the cluster (missing or unknown partitions)."""


class DataLossError(KafkaSourceError):
    """Offsets that a planned range needs no longer exist in Kafka."""


class KafkaReadTimeoutError(KafkaSourceError, TimeoutError):
    """Reading a planned offset range made no progress for longer than the poll timeout."""


class KafkaSourceFatalError(KafkaSourceError):
    """A Kafka error that retrying cannot fix (authorization, unknown topic, fatal client)."""


class KafkaUnavailableError(KafkaSourceError):
    """A retriable Kafka error persisted through the bounded retries (broker down?)."""


class SparkVersionError(KafkaSourceError, ImportError):
    """The installed PySpark is older than the source needs; upgrade it or use Spark's ``kafka``.

    Raised by :func:`~connectors.kafka.register` (and by importing the source's Spark
    classes), never by ``import connectors.kafka``. ``installed`` and ``minimum`` are
    PySpark version strings.
    """

    def __init__(self, installed: str, minimum: str) -> None:
        self.installed = installed
        self.minimum = minimum
        super().__init__(
            f"the kafka-rc source needs PySpark {minimum} or later (its Python data source "
            f"API with read limits); the installed PySpark is {installed}. Upgrade PySpark "
            f"(pip install 'pyspark>={minimum}'), or read with Spark's built-in 'kafka' "
            "format (the kit's sinks run on this version)"
        )

    def __reduce__(self) -> tuple[type[SparkVersionError], tuple[str, str]]:
        return (type(self), (self.installed, self.minimum))
