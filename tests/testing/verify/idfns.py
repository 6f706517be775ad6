"""Identity functions loaded by import path in the identity tests (``--id-fn`` style)."""

from __future__ import annotations

from connectors.verify import Record


def csv_id(record: Record) -> str:
    assert record.value is not None
    return record.value.decode().split(",")[0]


def csv_account(record: Record) -> str:
    assert record.value is not None
    return record.value.decode().split(",")[1]


def broken(record: Record) -> str:
    raise KeyError("no id here")


NOT_CALLABLE = 42
