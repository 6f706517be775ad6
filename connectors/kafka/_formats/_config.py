"""Options of the Schema Registry formats: :class:`RecordFormat` and the registry settings.

Validated at construction of the sink, without network I/O: a missing extra raises
:class:`~connectors._extras.MissingExtraError` naming it; a bad option
:class:`txn.TxnCode.CONFIG` naming it. The registry settings are the
``SchemaRegistryClient`` configuration (``url``, ``basic.auth.user.info``, ``ssl.*``, ...)
held as :class:`~connectors.kafka._client._secrets.Settings`, so the credentials never show in a
repr, a log line or an error.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connectors._extras import require
from connectors.kafka._client import Settings, scrub
from connectors.kafka._errors import KafkaConnectorError
from txn import TxnCode

EXTRA = "schema-registry"
AVRO, PROTOBUF, JSON_SCHEMA = "avro", "protobuf", "json-schema"
KINDS = (AVRO, PROTOBUF, JSON_SCHEMA)
# Confluent's subject name strategies, by the names the kit's options use.
STRATEGIES = ("topic", "record", "topic-record")
# SchemaRegistryClient settings that are numbers (the kit holds every setting as a string).
_NUMERIC = ("timeout", "cache.capacity", "cache.latest.ttl.sec", "max.retries")
_NUMERIC_MS = ("retries.wait.ms", "retries.max.wait.ms")
_URL_SCHEMES = ("http://", "https://", "mock://")


def confluent_registry() -> Any:
    """Return ``confluent_kafka.schema_registry``, with its serializers' dependencies.

    Raises:
        MissingExtraError: the ``schema-registry`` extra is not installed.

    """
    for module in ("fastavro", "jsonschema", "google.protobuf", "httpx2"):
        require(module, extra=EXTRA, needed_for="the Schema Registry formats")
    return require("confluent_kafka.schema_registry", extra=EXTRA, needed_for="the formats")


@dataclass(frozen=True, kw_only=True)
class RecordFormat:
    """How a key or value column becomes bytes in the Confluent wire format.

    * ``kind``: ``"avro"``, ``"protobuf"`` or ``"json-schema"``;
    * ``schema``: the writer schema (Avro or JSON Schema text); None derives it from the
      column's Spark type (docs/kafka-sink.md, "Schema Registry formats");
    * ``message``: Protobuf only, the generated message class as ``"module:Class"`` (or a
      dotted path), importable on the driver and the executors;
    * ``subject_strategy``: Confluent's subject naming, ``"topic"`` (``{topic}-value``),
      ``"record"`` (the record's full name) or ``"topic-record"`` (``{topic}-{record}``);
    * ``auto_register``: register the schema under the subject if it is not there; False
      looks it up and fails when the registry does not have it;
    * ``version``: use this registered version of the subject as the writer schema (no
      registration); ``latest`` is not offered: an epoch's replay must find the same id;
    * ``record_name``: name of the derived Avro record / JSON Schema title (default
      ``Value`` or ``Key``); ``normalize``: ask the registry to normalize the schema.
    """

    kind: str
    schema: str | None = None
    message: str | None = None
    subject_strategy: str = "topic"
    auto_register: bool = True
    version: int | None = None
    record_name: str | None = None
    normalize: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            _fail(f"format kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.subject_strategy not in STRATEGIES:
            _fail(
                f"subject_strategy must be one of {', '.join(STRATEGIES)}, "
                f"got {self.subject_strategy!r}"
            )
        if self.schema is not None and (not isinstance(self.schema, str) or not self.schema):
            _fail("schema must be the schema's text (a non-empty string) or None")
        if self.kind == PROTOBUF:
            if not isinstance(self.message, str) or not self.message:
                _fail("a protobuf format needs message='module:MessageClass' (generated code)")
            if self.schema is not None:
                _fail("a protobuf format takes its schema from message=, not schema=")
        elif self.message is not None:
            _fail(f"message= is for the protobuf format only (this one is {self.kind})")
        version = self.version
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            _fail(f"version must be a registered version number (int) or None, got {version!r}")
        if version is not None and version < 1:
            _fail(f"version must be >= 1, got {version}")
        if version is not None and self.kind == PROTOBUF:
            _fail("version= is for avro and json-schema (protobuf uses the message's schema)")
        object.__setattr__(self, "auto_register", bool(self.auto_register))
        object.__setattr__(self, "normalize", bool(self.normalize))
        if self.record_name is not None and not isinstance(self.record_name, str):
            _fail(f"record_name must be a string, got {self.record_name!r}")

    @classmethod
    def parse(cls, raw: object, option: str) -> RecordFormat | None:
        """Return the format named by ``raw`` (None, a kind, a mapping of options, or one)."""
        if raw is None or isinstance(raw, RecordFormat):
            return raw
        if isinstance(raw, str):
            return cls(kind=raw)
        if isinstance(raw, Mapping):
            try:
                return cls(**raw)
            except TypeError as exc:
                _fail(f"{option}: {exc}")
        _fail(f"{option} must be None, a format kind ({', '.join(KINDS)}) or a RecordFormat")
        raise AssertionError  # pragma: no cover - _fail raises

    def message_class(self) -> Any:
        """Import the Protobuf message class named by ``message`` (no network I/O)."""
        path = self.message or ""
        module, _, name = path.partition(":") if ":" in path else path.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as exc:
            _fail(f"message={path!r} cannot be imported ({exc}); name 'module:Class'")
        if not hasattr(cls, "DESCRIPTOR"):
            _fail(f"message={path!r} is not a generated Protobuf message class")
        return cls

    def describe(self) -> dict[str, object]:
        """Return the options as plain values (for the sink's fingerprint)."""
        return {
            "kind": self.kind,
            "schema": self.schema,
            "message": self.message,
            "subject_strategy": self.subject_strategy,
            "auto_register": self.auto_register,
            "version": self.version,
            "record_name": self.record_name,
            "normalize": self.normalize,
        }


def _fail(msg: str) -> None:
    raise KafkaConnectorError(msg, code=TxnCode.CONFIG)


def registry_settings(raw: object) -> Settings:
    """Validate the ``schema_registry`` option (a mapping of client settings) without I/O.

    The library's own client checks every setting (constructing it opens no connection);
    its complaint is re-raised as :class:`TxnCode.CONFIG` with secrets scrubbed.
    """
    if isinstance(raw, Settings):
        raw = raw.as_dict()
    if not isinstance(raw, Mapping):
        _fail("schema_registry must be a mapping of SchemaRegistryClient settings")
    assert isinstance(raw, Mapping)  # noqa: S101 - narrowed by _fail
    if any(not isinstance(k, str) for k in raw):
        _fail("schema_registry setting names must be strings")
    settings = Settings(tuple((k, str(v)) for k, v in raw.items()))
    url = settings.get("url") or ""
    if not url or not all(u.strip().startswith(_URL_SCHEMES) for u in url.split(",")):
        _fail(
            "schema_registry needs 'url': http(s)://host:port (or mock://scope for the "
            f"library's in-process registry in tests), got {url!r}"
        )
    sr = confluent_registry()
    try:
        sr.SchemaRegistryClient(client_settings(settings)).close()
    except (ValueError, TypeError) as exc:
        _fail(f"schema_registry: {scrub(str(exc))}")
    return settings


def client_settings(settings: Settings) -> dict[str, Any]:
    """Return the settings as ``SchemaRegistryClient`` takes them (numbers as numbers)."""
    conf: dict[str, Any] = settings.as_dict()
    for key in (*_NUMERIC, *_NUMERIC_MS):
        if key in conf:
            try:
                conf[key] = int(conf[key])
            except ValueError:
                try:
                    conf[key] = float(conf[key])
                except ValueError:
                    _fail(f"schema_registry: {key} must be a number, got {conf[key]!r}")
    return conf
