"""The formats' part of an epoch's plan, resolved once on the driver before it is logged.

:class:`FormatRequest` is what the driver's schema check decides without network I/O
(each formatted column's writer schema, derived from the Spark type or given);
:func:`resolve` turns it into a :class:`FormatPlan` with the registry's answers (subject,
schema id, version), cached per request by :class:`Resolver` so a registry is asked once
per schema and sink object. The plan travels to the write tasks inside the sink's
resource, and its digest is part of the resource's fingerprint, which the epoch log's plan
records: a replay of an epoch in doubt that would resolve another schema id is refused
(``txn.TxnCode.PLAN_MISMATCH``) instead of writing other bytes; the ids of a committed epoch
never change. Frozen, picklable, without registry settings (no credentials in the tasks).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from connectors.kafka._client import Settings
from connectors.kafka._errors import KafkaConnectorError
from connectors.kafka._formats import _schemas
from connectors.kafka._formats._config import AVRO, JSON_SCHEMA, PROTOBUF, RecordFormat
from connectors.kafka._formats._registry import RecordingRegistry, Registered, call, driver_client
from connectors.stage import StageCode

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

_SCHEMA_TYPES = {AVRO: "AVRO", JSON_SCHEMA: "JSON", PROTOBUF: "PROTOBUF"}


@dataclass(frozen=True, kw_only=True)
class ColumnRequest:
    """One formatted column as the driver's schema check sees it (no I/O yet)."""

    column: str  # "key" or "value"
    fmt: RecordFormat
    topic: str | None
    schema: str | None  # the writer schema text (avro, json-schema); None for protobuf


@dataclass(frozen=True, kw_only=True)
class ColumnPlan:
    """One formatted column as the write tasks serialize it."""

    column: str
    kind: str
    strategy: str
    topic: str | None
    schema: str | None  # writer schema text (avro, json-schema)
    message: str | None  # protobuf message class path
    subject: str
    schema_id: int
    registered: tuple[Registered, ...]  # every subject the library asked for

    @property
    def is_key(self) -> bool:
        """True for the key column (Confluent's ``MessageField.KEY``)."""
        return self.column == "key"


@dataclass(frozen=True)
class FormatPlan:
    """The formatted columns of one epoch's rows (at most a key and a value)."""

    columns: tuple[ColumnPlan, ...]

    def digest(self) -> str:
        """Digest of the whole plan (schema ids included): part of the sink's fingerprint."""
        raw = json.dumps([asdict(c) for c in self.columns], sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


def request(
    schema: StructType,
    topic: str | None,
    formats: dict[str, RecordFormat],
    *,
    topic_column: bool,
) -> tuple[ColumnRequest, ...]:
    """Check the formatted columns of ``schema`` and derive their writer schemas (no I/O).

    Raises:
        StageCode.INPUT_SCHEMA: a formatted column has a type the derived schema cannot
            represent, or a topic-based subject strategy meets rows without a fixed topic.

    """
    out = []
    for column, fmt in sorted(formats.items()):
        dtype = _schemas.struct_of(schema, column)
        if dtype is None:
            continue  # a missing key column: no key; a missing value is refused by _input
        if fmt.subject_strategy != "record" and (topic is None or topic_column):
            msg = (
                f"{column}_format uses the {fmt.subject_strategy!r} subject strategy, which "
                "names the subject after the topic: it needs the sink's topic= and no "
                "'topic' column (or subject_strategy='record')"
            )
            raise KafkaConnectorError(msg, column="topic", code=StageCode.INPUT_SCHEMA)
        name = fmt.record_name or column.capitalize()
        text = fmt.schema
        if text is None and fmt.kind == AVRO:
            text = _schemas.avro_schema(dtype, column, name)
        elif text is None and fmt.kind == JSON_SCHEMA:
            text = _schemas.json_schema(dtype, column, name)
        out.append(ColumnRequest(column=column, fmt=fmt, topic=topic, schema=text))
    return tuple(out)


def _strategy(name: str) -> Any:
    """Return Confluent's own subject name strategy function of the kit's option name."""
    from confluent_kafka import schema_registry as sr

    return {
        "topic": sr.topic_subject_name_strategy,
        "record": sr.record_subject_name_strategy,
        "topic-record": sr.topic_record_subject_name_strategy,
    }[name]


def context(topic: str | None, column: str) -> Any:
    """Confluent's ``SerializationContext`` of ``column`` (key or value) for ``topic``."""
    from confluent_kafka.serialization import MessageField, SerializationContext

    field = MessageField.KEY if column == "key" else MessageField.VALUE
    return SerializationContext(topic or "", field)


def _record_name(req: ColumnRequest) -> str | None:
    if req.fmt.kind == PROTOBUF:
        return str(req.fmt.message_class().DESCRIPTOR.full_name)
    assert req.schema is not None  # noqa: S101 - request() derived or took it
    if req.fmt.kind == AVRO:
        return _schemas.avro_record_name(req.schema)
    return _schemas.json_title(req.schema)


def resolve(client: Any, req: ColumnRequest) -> ColumnPlan:
    """Register or look up ``req``'s schema (network I/O, driver only); return its plan."""
    fmt = req.fmt
    if fmt.kind == PROTOBUF:
        return _resolve_protobuf(client, req)
    from confluent_kafka.schema_registry import Schema

    record = _record_name(req)
    subject = _strategy(fmt.subject_strategy)(context(req.topic, req.column), record)
    if not subject:
        msg = (
            f"{req.column}_format: the {fmt.subject_strategy!r} strategy needs a named schema "
            "(an Avro record name or a JSON Schema title); set record_name= or the schema's name"
        )
        raise KafkaConnectorError(msg, column=req.column, code=StageCode.INPUT_SCHEMA)
    text = req.schema
    if fmt.version is not None:
        found = call(
            f"version {fmt.version} of subject {subject!r}",
            lambda: client.get_version(subject, fmt.version),
        )
        text = found.schema.schema_str
    else:
        schema = Schema(text, _SCHEMA_TYPES[fmt.kind])
        if fmt.auto_register:
            found = call(
                f"registering the schema of {req.column!r} under subject {subject!r}",
                lambda: client.register_schema_full_response(
                    subject, schema, normalize_schemas=fmt.normalize
                ),
            )
        else:
            found = call(
                f"the schema of {req.column!r} under subject {subject!r} (auto_register=False)",
                lambda: client.lookup_schema(subject, schema, normalize_schemas=fmt.normalize),
            )
    reg = Registered(subject, int(found.schema_id), found.version)
    return ColumnPlan(
        column=req.column, kind=fmt.kind, strategy=fmt.subject_strategy, topic=req.topic, schema=text, message=None, subject=subject,
        schema_id=reg.schema_id, registered=(reg,),
    )  # fmt: skip


def _resolve_protobuf(client: Any, req: ColumnRequest) -> ColumnPlan:
    """Let the library's ProtobufSerializer register (or look up) the message's schema.

    It serializes an empty message once: the library computes the subject, the schema of
    the message's file and its references exactly as it will for every row; the recorded
    answers become the plan.
    """
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    fmt = req.fmt
    cls = fmt.message_class()
    recording = RecordingRegistry(client)
    serializer = ProtobufSerializer(
        cls,
        recording,
        {
            "auto.register.schemas": fmt.auto_register,
            "normalize.schemas": fmt.normalize,
            "use.deprecated.format": False,
            "subject.name.strategy": _strategy(fmt.subject_strategy),
        },
    )
    framed = serializer(cls(), context(req.topic, req.column))
    schema_id = int.from_bytes(framed[1:5], "big")
    subject = _strategy(fmt.subject_strategy)(
        context(req.topic, req.column), cls.DESCRIPTOR.full_name
    )
    return ColumnPlan(
        column=req.column, kind=fmt.kind, strategy=fmt.subject_strategy, topic=req.topic, schema=None, message=fmt.message, subject=subject,
        schema_id=schema_id, registered=tuple(recording.registered),
    )  # fmt: skip


class Resolver:
    """The driver's registry client and its resolved plans (one request per schema).

    Picklable: the client and the cache are dropped (Spark Connect ships the sink).
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._init()

    def _init(self) -> None:
        self._client: Any = None
        self._plans: dict[ColumnRequest, ColumnPlan] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"_settings": self._settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init()

    def plan(self, requests: tuple[ColumnRequest, ...]) -> FormatPlan | None:
        """Return the plan of ``requests`` (None when no column is formatted)."""
        if not requests:
            return None
        with self._lock:
            if self._client is None:
                self._client = driver_client(self._settings)
            for req in requests:
                if req not in self._plans:
                    self._plans[req] = resolve(self._client, req)
            return FormatPlan(tuple(self._plans[r] for r in requests))
