"""The identity of a user's records: which value is a record's id, which its ordering key.

The checker needs, for every input and output record, a unique id (to find lost and
duplicated records) and an ordering key (records of one key must keep their input order).
:func:`record_identity` builds that :data:`IdentityFn` from two parts, each either

* a :class:`FieldPath`: a dotted path into the record's JSON value (``order.id``);
* any callable taking a :class:`Record` (e.g. one loaded by :func:`load_callable` from an
  import path ``pkg.mod:func``); or, for the ordering key only,
* :func:`kafka_key` (the record's Kafka key), or None: no ordering check.

A record the parts cannot read (not JSON, no such field, the callable raised or returned
None) raises :class:`RecordFormatError` naming the record and the option to change.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from typing import Any

from connectors.verify._errors import IdentityOptionError, RecordFormatError
from connectors.verify._records import IdentityFn, Record, RecordIdentity

Part = Callable[[Record], object]


def _where(record: Record) -> str:
    return f"record {record.topic}/{record.partition}@{record.offset}"


class FieldPath:
    """A dotted path into a record's JSON value, as a callable ``Record -> value``."""

    def __init__(self, path: str) -> None:
        names = path.split(".") if isinstance(path, str) else []
        if not names or not all(names):
            msg = f"a field path is names joined by dots (e.g. order.id), got {path!r}"
            raise IdentityOptionError(msg)
        self.path = path
        self._names = tuple(names)
        self._last: tuple[Record, Any] | None = None  # id and key often read one record

    def __repr__(self) -> str:
        return f"FieldPath({self.path!r})"

    def __call__(self, record: Record) -> object:
        value = self._body(record)
        for depth, name in enumerate(self._names):
            if not isinstance(value, dict) or name not in value:
                at = ".".join(self._names[: depth + 1])
                msg = f"{_where(record)} has no field {at!r} (field path {self.path!r})"
                raise RecordFormatError(msg)
            value = value[name]
        if value is None or isinstance(value, (dict, list)):
            msg = (
                f"{_where(record)}: field {self.path!r} is {json.dumps(value)}, not a "
                "string or number"
            )
            raise RecordFormatError(msg)
        return value

    def _body(self, record: Record) -> Any:
        if self._last is not None and self._last[0] is record:
            return self._last[1]
        if record.value is None:
            msg = f"{_where(record)} has no value (a tombstone), so no field {self.path!r}"
            raise RecordFormatError(msg)
        try:
            body = json.loads(record.value)
        except ValueError:
            msg = (
                f"{_where(record)} is not JSON, so it has no field {self.path!r}; pass a "
                "function that reads your format (--id-fn / key_fn)"
            )
            raise RecordFormatError(msg) from None
        self._last = (record, body)
        return body


def kafka_key(record: Record) -> object:
    """Return the record's Kafka key as text (None without a key: no order check)."""
    return None if record.key is None else record.key.decode("utf-8", "backslashreplace")


def load_callable(import_path: str) -> Callable[..., Any]:
    """Return the callable named ``pkg.mod:func`` (``func`` may be ``Class.attr``)."""
    module_name, sep, attr = import_path.partition(":")
    if not sep or not module_name or not attr:
        msg = f"a function is given as 'package.module:function', got {import_path!r}"
        raise IdentityOptionError(msg)
    try:
        target: Any = importlib.import_module(module_name)
        for name in attr.split("."):
            target = getattr(target, name)
    except (ImportError, AttributeError) as exc:
        msg = f"cannot load {import_path!r}: {type(exc).__name__}: {exc}"
        raise IdentityOptionError(msg) from exc
    if not callable(target):
        msg = f"{import_path!r} is a {type(target).__name__}, not a function"
        raise IdentityOptionError(msg)
    return target  # type: ignore[no-any-return]


def _read(part: Part, record: Record, what: str) -> object:
    try:
        return part(record)
    except RecordFormatError:
        raise
    except Exception as exc:  # a user's function: name it and the record, keep the cause
        msg = f"{what} function {part!r} failed on {_where(record)}: {type(exc).__name__}: {exc}"
        raise RecordFormatError(msg) from exc


class _Identity:
    """An :data:`IdentityFn` from an id part and an optional ordering-key part."""

    def __init__(self, id_of: Part, order_key_of: Part | None) -> None:
        self.id_of, self.order_key_of = id_of, order_key_of

    def __call__(self, record: Record) -> RecordIdentity:
        rid = _read(self.id_of, record, "id")
        if rid is None:
            msg = f"the id function {self.id_of!r} returned None for {_where(record)}"
            raise RecordFormatError(msg)
        key = (
            None if self.order_key_of is None else _read(self.order_key_of, record, "ordering key")
        )
        # No key: the record is its own key group, so no order is demanded of it.
        return RecordIdentity(id=str(rid), key=f"\0{rid}" if key is None else str(key))


def record_identity(
    id_of: Part | str = "id",
    order_key_of: Part | str | None = "key",
) -> IdentityFn:
    """Return the identity function the checker uses (module docstring).

    ``id_of`` / ``order_key_of``: a field path (a string) or a callable ``Record ->
    value``; ``order_key_of=None`` checks no order. The default is the format of
    :func:`connectors.verify.make_input_value` (JSON ``id`` and ``key`` fields).
    """

    def part(spec: Part | str) -> Part:
        return FieldPath(spec) if isinstance(spec, str) else spec

    return _Identity(part(id_of), None if order_key_of is None else part(order_key_of))
