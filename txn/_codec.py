"""Serialization of epoch-log records, shared by every :class:`~txn.EpochLog` implementation.

Format of one record (one line of UTF-8 JSON, no trailing newline)::

    {"crc32c": "1a2b3c4d", "epoch": 7, "parallelism": 4, ..., "type": "plan", "v": 1}

1. the body is every field of the record plus ``type`` (``plan`` / ``decision`` /
   ``completion`` / ``binding``) and the format version ``v``;
2. ``crc32c`` is the CRC-32C (Castagnoli) of the body serialized canonically (sorted keys,
   no spaces), as 8 lower-case hex digits;
3. decoding checks the JSON, the checksum, the type tag, the version, the exact field set
   and every field's type, so a truncated or altered record is always detected;
4. optional fields (a plan's ``input``, :class:`~txn.InputOffsets`) are written only when
   set, so records without them are byte-for-byte those of earlier releases.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import crc32c

from txn._errors import TxnCode, TxnError
from txn._model import (
    CommitMode,
    EpochCompletion,
    EpochDecision,
    EpochPlan,
    Guarantee,
    LogRecord,
    QueryBinding,
)
from txn._offsets import InputOffsets

FORMAT_VERSION = 1
_CRC_FIELD = "crc32c"

_FIELDS: dict[str, dict[str, type]] = {
    "plan": {
        "sink_id": str,
        "epoch": int,
        "parallelism": int,
        "fingerprint": str,
        "guarantee": str,
        "mode": str,
        "attempt": int,
    },
    "decision": {"sink_id": str, "epoch": int, "commit": bool, "reason": str},
    "completion": {"sink_id": str, "epoch": int, "committed": bool},
    "binding": {"sink_id": str, "query_id": str, "epoch_offset": int},
}
# Fields a record may leave out (written only when set): name -> JSON type.
_OPTIONAL: dict[str, dict[str, type]] = {"plan": {"input": dict}}


def _canonical(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _checksum(body: Mapping[str, Any]) -> str:
    return f"{crc32c.crc32c(_canonical(body)):08x}"


def seal(body: Mapping[str, Any]) -> bytes:
    """Return ``body`` as one canonical JSON line (no newline) with its checksum added."""
    if _CRC_FIELD in body:
        msg = f"field {_CRC_FIELD!r} is reserved for the checksum"
        raise ValueError(msg)
    return _canonical({**body, _CRC_FIELD: _checksum(body)})


def unseal(data: bytes, *, source: str) -> dict[str, Any]:
    """Parse one sealed line and verify its checksum; raise TxnCode.EPOCH_LOG_CORRUPT naming source."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise corrupt_error(source, f"not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise corrupt_error(source, "not a JSON object")
    stored = obj.pop(_CRC_FIELD, None)
    if not isinstance(stored, str):
        raise corrupt_error(source, "checksum field missing")
    actual = _checksum(obj)
    if stored != actual:
        raise corrupt_error(source, f"checksum mismatch (stored {stored}, computed {actual})")
    return obj


def corrupt_error(source: str, what: str) -> TxnError:
    return TxnError(
        f"epoch log {source} is corrupt: {what}. The file was truncated or altered outside "
        "this library; restore it from a backup. Do not delete it while an epoch may be in "
        "doubt: the log is the only record of commit decisions.",
        code=TxnCode.EPOCH_LOG_CORRUPT,
    )


def encode_record(record: LogRecord) -> bytes:
    """Serialize one log record to a checksummed JSON line (without a newline)."""
    body: dict[str, Any]
    if isinstance(record, EpochPlan):
        body = {
            "type": "plan",
            "sink_id": record.sink_id,
            "epoch": record.epoch,
            "parallelism": record.parallelism,
            "fingerprint": record.fingerprint,
            "guarantee": record.guarantee.value,
            "mode": record.mode.value,
            "attempt": record.attempt,
        }
        if record.input is not None:
            body["input"] = record.input.to_body()
    elif isinstance(record, EpochDecision):
        body = {
            "type": "decision",
            "sink_id": record.sink_id,
            "epoch": record.epoch,
            "commit": record.commit,
            "reason": record.reason,
        }
    elif isinstance(record, EpochCompletion):
        body = {
            "type": "completion",
            "sink_id": record.sink_id,
            "epoch": record.epoch,
            "committed": record.committed,
        }
    elif isinstance(record, QueryBinding):
        body = {
            "type": "binding",
            "sink_id": record.sink_id,
            "query_id": record.query_id,
            "epoch_offset": record.epoch_offset,
        }
    else:  # pragma: no cover - guarded by the type checker
        msg = f"not an epoch log record: {record!r}"
        raise TypeError(msg)
    body["v"] = FORMAT_VERSION
    return seal(body)


def decode_record(data: bytes, *, source: str = "<bytes>") -> LogRecord:
    """Parse and verify one record written by :func:`encode_record`.

    Args:
        data: the bytes of one record (a trailing newline is tolerated).
        source: where the bytes came from (file and line, or topic/partition/offset); it is
            named in the error.

    Raises:
        TxnCode.EPOCH_LOG_CORRUPT: the bytes are truncated, altered or not a record.

    """
    body = unseal(data.rstrip(b"\n"), source=source)
    return record_from_body(body, source=source)


def record_from_body(body: dict[str, Any], *, source: str) -> LogRecord:
    """Build a record from a verified body, checking type tag, version and every field."""
    kind = body.pop("type", None)
    version = body.pop("v", None)
    if version != FORMAT_VERSION:
        raise corrupt_error(source, f"unsupported record version {version!r}")
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise corrupt_error(source, f"unknown record type {kind!r}")
    optional = {k: t for k, t in _OPTIONAL.get(kind, {}).items() if k in body}
    expected = {**_FIELDS[kind], **optional}
    if set(body) != set(expected):
        raise corrupt_error(
            source, f"{kind} record has fields {sorted(body)}, want {sorted(_FIELDS[kind])}"
        )
    for name, typ in expected.items():
        value = body[name]
        if type(value) is not typ:
            raise corrupt_error(source, f"{kind} field {name!r} is {value!r}, want {typ.__name__}")
    if kind == "plan":
        try:
            offsets = None if "input" not in body else InputOffsets.from_body(body["input"])
        except ValueError as exc:
            raise corrupt_error(source, f"plan record has bad input offsets ({exc})") from None
        try:
            return EpochPlan(
                sink_id=body["sink_id"],
                epoch=body["epoch"],
                parallelism=body["parallelism"],
                fingerprint=body["fingerprint"],
                guarantee=Guarantee(body["guarantee"]),
                mode=CommitMode(body["mode"]),
                attempt=body["attempt"],
                input=offsets,
            )
        except ValueError as exc:
            raise corrupt_error(source, f"plan record has a bad enum value ({exc})") from None
    if kind == "decision":
        return EpochDecision(
            sink_id=body["sink_id"],
            epoch=body["epoch"],
            commit=body["commit"],
            reason=body["reason"],
        )
    if kind == "binding":
        return QueryBinding(
            sink_id=body["sink_id"], query_id=body["query_id"], epoch_offset=body["epoch_offset"]
        )
    return EpochCompletion(
        sink_id=body["sink_id"], epoch=body["epoch"], committed=body["committed"]
    )
