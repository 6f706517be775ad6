"""Errors of the Schema Registry formats (sink and decode helper).

``SchemaRegistryFormatError`` (a :class:`~connectors.kafka.KafkaSinkError`) is their base;
the input errors are also :class:`~connectors.kafka.KafkaInputError` (the stage's
``InputError``: a re-run cannot help). Registry messages are scrubbed of secrets.
"""

from __future__ import annotations

from connectors.kafka._errors import KafkaRecordError, KafkaSinkError


class SchemaRegistryFormatError(KafkaSinkError):
    """Base class of the Schema Registry format errors."""


class SchemaRegistryUnavailableError(SchemaRegistryFormatError):
    """The Schema Registry did not answer within the bounded wait (checked on the driver)."""


class SchemaResolutionError(SchemaRegistryFormatError):
    """The registry refused the schema: incompatible, not registered, or access denied."""

    retry_stage = False


class RecordFormatError(KafkaRecordError):
    """A row does not fit the writer schema (or a stored record not its reader schema)."""
