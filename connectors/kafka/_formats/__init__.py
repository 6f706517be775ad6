"""Schema Registry formats of the Kafka sink (and the source's decode helpers).

A layer before the Kafka writer: ``key_format`` / ``value_format`` make the sink turn a
key or value column (a struct, or any type the format maps) into records in the Confluent
wire format, with confluent-kafka's own serializers and ``SchemaRegistryClient``
(docs/kafka-sink.md, "Schema Registry formats"). On the driver the schema is derived or
taken, then registered or looked up once per schema (``_plan``), before the epoch is
logged; the resulting :class:`FormatPlan` travels in the sink's resource and its digest is
in the plan's fingerprint. In the write task the participant is wrapped
(``_participant``) so the writer sees framed bytes (``_encode``).

:class:`SinkFormats` is what the sink's connector calls: ``check_input`` (driver, no I/O),
``unwrap`` and ``resolve`` (driver, registry I/O once per schema).
"""

from __future__ import annotations

import copy as _copy
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from connectors.kafka._client import Settings
from connectors.kafka._errors import KafkaConnectorError
from connectors.kafka._formats._config import RecordFormat as RecordFormat
from connectors.kafka._formats._config import registry_settings
from connectors.kafka._formats._decode import (
    decode_avro as decode_avro,
)
from connectors.kafka._formats._decode import (
    decode_json_schema as decode_json_schema,
)
from connectors.kafka._formats._decode import (
    decode_protobuf as decode_protobuf,
)
from connectors.kafka._formats._participant import formatted as formatted
from connectors.kafka._formats._plan import (
    ColumnRequest,
    Resolver,
    request,
)
from connectors.kafka._formats._plan import (
    FormatPlan as FormatPlan,
)
from connectors.stage import InputSpec
from txn import TxnCode

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

_Config = TypeVar("_Config")


def parse_formats(
    key_format: object, value_format: object, schema_registry: object
) -> tuple[RecordFormat | None, RecordFormat | None, Settings]:
    """Validate the three options of a sink (no network I/O); return them parsed.

    Raises:
        TxnCode.CONFIG: a bad format or registry setting, or a format without
            ``schema_registry``.
        MissingExtraError: a format is set and the ``schema-registry`` extra is missing.

    """
    key = RecordFormat.parse(key_format, "key_format")
    value = RecordFormat.parse(value_format, "value_format")
    if key is None and value is None:
        if not _empty(schema_registry):
            msg = "schema_registry is set but neither key_format nor value_format uses it"
            raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
        return None, None, Settings()
    if _empty(schema_registry):
        msg = (
            "key_format/value_format need schema_registry={'url': 'http://registry:8081', "
            "...} (the SchemaRegistryClient settings)"
        )
        raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
    for fmt in (key, value):
        if fmt is not None and fmt.message is not None:
            fmt.message_class()  # importable now, not in a task
    return key, value, registry_settings(schema_registry)


def _empty(raw: object) -> bool:
    return raw is None or (isinstance(raw, Settings) and not raw.items) or raw == {}


def for_tasks(cfg: _Config) -> _Config:
    """Return a copy of a sink config without the registry settings (the tasks need none)."""
    copy = _copy.copy(cfg)
    object.__setattr__(copy, "schema_registry", Settings())
    return copy


@dataclass(frozen=True)
class FormattedLayout:
    """A connector's input layout with the formatted columns' requests (driver only)."""

    layout: Any
    requests: tuple[ColumnRequest, ...]


class SinkFormats:
    """The formats of one sink object: its options and its driver-side resolver."""

    def __init__(
        self, key: RecordFormat | None, value: RecordFormat | None, registry: Settings
    ) -> None:
        self._formats = {n: f for n, f in (("key", key), ("value", value)) if f is not None}
        self._resolver = Resolver(registry)

    @property
    def active(self) -> bool:
        """True when a column is formatted."""
        return bool(self._formats)

    def formats_column(self, name: str) -> bool:
        """Return whether column ``name`` ("key" or "value") is formatted."""
        return name in self._formats

    def check_input(
        self, schema: StructType, spec: InputSpec, topic: str | None, topic_column: bool
    ) -> InputSpec:
        """Derive the formatted columns' writer schemas (no I/O) into ``spec``'s layout."""
        if not self._formats:
            return spec
        reqs = request(schema, topic, self._formats, topic_column=topic_column)
        return replace(spec, layout=FormattedLayout(spec.layout, reqs))

    @staticmethod
    def unwrap(spec: InputSpec) -> InputSpec:
        """Return ``spec`` with the connector's own layout."""
        if isinstance(spec.layout, FormattedLayout):
            return replace(spec, layout=spec.layout.layout)
        return spec

    def resolve(self, spec: InputSpec) -> tuple[Any, FormatPlan | None]:
        """Return the connector's layout and the formats' plan (registry I/O, cached)."""
        if not isinstance(spec.layout, FormattedLayout):
            return spec.layout, None
        return spec.layout.layout, self._resolver.plan(spec.layout.requests)
