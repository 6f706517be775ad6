"""Unit tests of the table check's analysis on synthetic inputs and rows (no PostgreSQL).

As for the topic check: each test starts from a clean table that passes, breaks exactly one
invariant and asserts that the check reports it (and nothing else).
"""

from __future__ import annotations

import json
import pickle

import pytest
from rich.console import Console

from connectors.verify import (
    TABLE_KINDS,
    Anomaly,
    AnomalyKind,
    Record,
    TableReport,
    TableRow,
    analyze_table,
    json_identity,
    make_input_value,
    print_report,
)

KEYS = 4


def inputs(n: int = 40) -> list[Record]:
    """Records 0..n-1 over KEYS keys; a key's records all in one input partition, in order."""
    out, seq, offsets = [], dict.fromkeys(range(KEYS), 0), {0: 0, 1: 0}
    for i in range(n):
        k = i % KEYS
        part = k % 2
        out.append(
            Record(
                topic="in",
                partition=part,
                offset=offsets[part],
                key=f"k{k}".encode(),
                value=make_input_value(i, f"k{k}", seq[k]),
            )
        )
        seq[k] += 1
        offsets[part] += 1
    return out


def op_of(record: Record) -> str:
    """A changelog rule for the tests: id 37 (the last record of k1) deletes its key."""
    return "delete" if json.loads(record.value or b"")["id"] == 37 else "update_after"


def appended(records: list[Record]) -> list[TableRow]:
    return [TableRow(json_identity(r).id, json_identity(r).key) for r in records]


def last_per_key(records: list[Record], deleted: frozenset[str] = frozenset()) -> list[TableRow]:
    last: dict[str, TableRow] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        ident = json_identity(r)
        last[ident.key] = TableRow(ident.id, ident.key)
    return [row for key, row in sorted(last.items()) if key not in deleted]


def check(rows: list[TableRow], mode: str = "append", **kwargs: object) -> TableReport:
    return analyze_table(inputs(), rows, write_mode=mode, identity=json_identity, **kwargs)  # type: ignore[arg-type]


def only(report: TableReport, kind: AnomalyKind, n: int = 1) -> None:
    assert report.count(kind) == n, report.examples
    assert sum(report.anomaly_counts.values()) == n, report.examples
    assert not report.ok


def test_clean_tables_pass_in_every_mode() -> None:
    recs = inputs()
    assert check(appended(recs)).ok
    assert check(last_per_key(recs), "upsert").ok
    changelog = check(last_per_key(recs, frozenset({"k1"})), "changelog", op=op_of)
    assert changelog.ok, changelog.examples
    assert changelog.expected_rows == KEYS - 1
    report = check(appended(recs))
    assert (report.input_records, report.table_rows, report.expected_rows) == (40, 40, 40)


def test_append_flags_a_lost_record() -> None:
    rows = appended(inputs())
    del rows[7]
    report = check(rows)
    only(report, AnomalyKind.LOST)
    assert report.anomalies(AnomalyKind.LOST)[0].record_id == "7"


def test_append_flags_a_duplicated_record() -> None:
    rows = appended(inputs())
    rows.append(rows[5])
    report = check(rows)
    only(report, AnomalyKind.DUPLICATE)
    assert report.anomalies(AnomalyKind.DUPLICATE)[0].record_id == "5"


def test_append_flags_a_row_the_input_never_had() -> None:
    rows = [*appended(inputs()), TableRow("4242", "k0")]
    only(check(rows), AnomalyKind.UNKNOWN)


def test_upsert_flags_a_row_holding_an_older_change_of_its_key() -> None:
    rows = last_per_key(inputs())
    rows[0] = TableRow("0", rows[0].key)  # k0's first record instead of its last (36)
    report = check(rows, "upsert")
    only(report, AnomalyKind.STALE_ROW)
    assert "its last change is 36" in report.anomalies(AnomalyKind.STALE_ROW)[0].detail


def test_upsert_flags_a_missing_key_naming_its_last_record() -> None:
    rows = [r for r in last_per_key(inputs()) if r.key != "k2"]
    report = check(rows, "upsert")
    only(report, AnomalyKind.LOST)
    assert report.anomalies(AnomalyKind.LOST)[0].record_id == "38"


def test_upsert_flags_two_rows_of_a_key_and_unknown_keys() -> None:
    rows = last_per_key(inputs())
    only(check([*rows, rows[1]], "upsert"), AnomalyKind.DUPLICATE)
    only(check([*rows, TableRow("1", "k99")], "upsert"), AnomalyKind.UNKNOWN)


def test_changelog_flags_a_deleted_key_still_in_the_table() -> None:
    report = check(last_per_key(inputs()), "changelog", op=op_of)  # k1 not deleted
    only(report, AnomalyKind.STALE_ROW)
    assert "deleted by record 37" in report.anomalies(AnomalyKind.STALE_ROW)[0].detail


def test_a_prepared_transaction_left_is_an_open_transaction() -> None:
    report = check(appended(inputs()), prepared=["eos:s:3:0:1"])
    only(report, AnomalyKind.OPEN_TRANSACTION)
    assert report.prepared == ("eos:s:3:0:1",)
    assert "eos:s:3:0:1" in report.anomalies(AnomalyKind.OPEN_TRANSACTION)[0].detail


def test_epoch_log_anomalies_found_elsewhere_are_reported() -> None:
    extra = [
        Anomaly(kind=AnomalyKind.EPOCH_LOG_MISMATCH, detail="p1 behind", partition=1),
        Anomaly(kind=AnomalyKind.IN_DOUBT_EPOCH, detail="epoch 3 in doubt"),
    ]
    report = check(appended(inputs()), extra=extra, epoch_log_checked=True, last_committed_epoch=2)
    assert report.count(AnomalyKind.EPOCH_LOG_MISMATCH) == 1
    assert report.count(AnomalyKind.IN_DOUBT_EPOCH) == 1
    assert not report.ok


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="write_mode must be one of"):
        check([], "merge")
    with pytest.raises(ValueError, match="needs op"):
        check([], "changelog")


def test_report_pickles_and_renders_only_table_kinds() -> None:
    report = check(appended(inputs())[1:], prepared=["eos:s:1:0:0"])
    assert pickle.loads(pickle.dumps(report)) == report
    assert set(report.anomaly_counts) == set(TABLE_KINDS)
    console = Console(record=True, width=160)
    print_report(report, console)
    text = console.export_text()
    assert "FAILED" in text and "stale_row" in text and "aborted_read" not in text
