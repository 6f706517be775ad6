"""Unit tests of the checker's record identity: field paths, functions by import path."""

from __future__ import annotations

import json

import pytest

from connectors.verify import (
    AnomalyKind,
    FieldPath,
    IdentityOptionError,
    Record,
    RecordFormatError,
    analyze,
    kafka_key,
    load_callable,
    record_identity,
)


def rec(
    value: bytes | None, offset: int = 0, key: bytes | None = None, partition: int = 0
) -> Record:
    return Record(topic="t", partition=partition, offset=offset, key=key, value=value)


def js(doc: object, offset: int = 0, key: bytes | None = None) -> Record:
    return rec(json.dumps(doc).encode(), offset, key)


def test_default_identity_reads_the_id_and_key_fields() -> None:
    ident = record_identity()(js({"id": 7, "key": "k1", "seq": 0}))
    assert (ident.id, ident.key) == ("7", "k1")


def test_a_nested_field_path_and_the_kafka_key_as_ordering_key() -> None:
    ident = record_identity("order.id", kafka_key)(
        js({"order": {"id": "o-9", "account": "a"}}, key=b"acct-1")
    )
    assert (ident.id, ident.key) == ("o-9", "acct-1")


def test_no_ordering_key_makes_each_record_its_own_key() -> None:
    ident = record_identity("id", None)
    assert ident(js({"id": 1})).key != ident(js({"id": 2})).key
    # a record without a Kafka key is not ordered against others either
    by_kafka = record_identity("id", kafka_key)
    assert by_kafka(js({"id": 1})).key != by_kafka(js({"id": 2})).key


@pytest.mark.parametrize(
    ("record", "text"),
    [
        (rec(b"\x00\x01 not json"), "is not JSON"),
        (rec(None), "has no value"),
        (js({"order": {"no_id": 1}}), "has no field 'order.id'"),
        (js({"order": "flat"}), "has no field 'order.id'"),
        (js({"order": {"id": None}}), "is null"),
        (js({"order": {"id": {"a": 1}}}), "not a string or number"),
    ],
)
def test_records_without_the_identity_raise_a_format_error_naming_the_record(
    record: Record, text: str
) -> None:
    with pytest.raises(RecordFormatError, match=text) as info:
        record_identity("order.id", None)(record)
    assert "t/0@0" in str(info.value)


@pytest.mark.parametrize("path", ["", "a..b", ".a", "a."])
def test_malformed_field_paths_are_refused_at_construction(path: str) -> None:
    with pytest.raises(IdentityOptionError, match="field path"):
        FieldPath(path)


def test_functions_by_import_path() -> None:
    ident = record_identity(
        load_callable("tests.testing.verify.idfns:csv_id"),
        load_callable("tests.testing.verify.idfns:csv_account"),
    )
    assert ident(rec(b"r-1,acct-7,100")) == ident(rec(b"r-1,acct-7,100"))
    assert (ident(rec(b"r-1,acct-7,100")).id, ident(rec(b"r-1,acct-7,100")).key) == (
        "r-1",
        "acct-7",
    )


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("tests.testing.verify.idfns", "package.module:function"),
        ("tests.testing.verify.no_such_module:f", "ModuleNotFoundError"),
        ("tests.testing.verify.idfns:nope", "AttributeError"),
        ("tests.testing.verify.idfns:NOT_CALLABLE", "not a function"),
    ],
)
def test_bad_import_paths_are_option_errors(path: str, text: str) -> None:
    with pytest.raises(IdentityOptionError, match=text):
        load_callable(path)


def test_a_failing_user_function_is_a_format_error_naming_it_and_the_record() -> None:
    ident = record_identity(load_callable("tests.testing.verify.idfns:broken"), None)
    with pytest.raises(RecordFormatError, match="broken.*t/0@5.*KeyError"):
        ident(rec(b"x", offset=5))


def test_ordering_key_other_than_the_kafka_key_finds_a_reordering() -> None:
    # The ordering key is a field of the value; the Kafka keys differ, so ordering by the
    # Kafka key would see nothing wrong.
    inputs = [js({"id": i, "acct": "a"}, offset=i, key=f"k{i}".encode()) for i in range(3)]
    swapped = [inputs[0], inputs[2], inputs[1]]
    output = [
        Record(topic="out", partition=0, offset=n, key=r.key, value=r.value)
        for n, r in enumerate(swapped)
    ]
    kwargs = {"scans": {}, "committed_ends": {}}
    by_field = analyze(inputs, output, output, identity=record_identity("id", "acct"), **kwargs)
    assert by_field.count(AnomalyKind.REORDERED) == 1
    by_kafka_key = analyze(
        inputs, output, output, identity=record_identity("id", kafka_key), **kwargs
    )
    assert by_kafka_key.ok
