"""The checker's expected sets (ids instead of an input topic) and dead letters (no Kafka).

Each case starts from a world that passes and breaks one thing; the report must name it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.verify import (
    EXPECTED,
    AnomalyKind,
    CheckReport,
    IdentityOptionError,
    PartitionScan,
    Record,
    RecordIdentity,
    TableRow,
    analyze,
    analyze_table,
    expected_records,
    id_range,
    ids_in_file,
    kafka_key,
    record_identity,
    with_expected,
)

BY_KEY = with_expected(record_identity(kafka_key, None))


def out(*ids: int, topic: str = "out") -> list[Record]:
    return [
        Record(topic=topic, partition=0, offset=o, key=f"r{i}".encode(), value=b"\x00opaque")
        for o, i in enumerate(ids)
    ]


def check(inputs: list[Record], output: list[Record], dead: list[Record]) -> CheckReport:
    scan = PartitionScan(partition=0, high_watermark=len(output), last_stable_offset=len(output))
    return analyze(
        inputs,
        output,
        output,
        scans={0: scan},
        committed_ends={0: len(output)},
        identity=BY_KEY,
        dead_letters=dead,
    )


def test_every_input_once_in_the_output_or_the_dead_letters_passes() -> None:
    report = check(out(*range(10), topic="in"), out(*range(7)), out(7, 8, 9, topic="dlq"))
    assert report.ok, report
    assert report.dead_letter_records == 3 and report.committed_records == 7


def test_dead_letters_not_counted_are_lost() -> None:
    report = check(out(*range(10), topic="in"), out(*range(7)), [])
    assert report.count(AnomalyKind.LOST) == 3


def test_a_record_written_and_dead_lettered_is_reported_as_such() -> None:
    report = check(out(*range(10), topic="in"), out(*range(8)), out(7, 8, 9, topic="dlq"))
    assert report.count(AnomalyKind.DEAD_LETTERED_AND_WRITTEN) == 1
    assert report.anomalies(AnomalyKind.DEAD_LETTERED_AND_WRITTEN)[0].record_id == "r7"
    assert report.count(AnomalyKind.DUPLICATE) == 0 and report.count(AnomalyKind.LOST) == 0


def test_a_dead_letter_twice_or_unknown_is_reported() -> None:
    dead = out(7, 8, 9, 9, 42, topic="dlq")
    report = check(out(*range(10), topic="in"), out(*range(7)), dead)
    assert report.count(AnomalyKind.DUPLICATE) == 1
    assert report.count(AnomalyKind.UNKNOWN) == 1
    assert report.anomalies(AnomalyKind.UNKNOWN)[0].record_id == "r42"


def test_an_expected_range_is_compared_by_id_as_text() -> None:
    ident = with_expected(record_identity("id", "key"))  # outputs: JSON id; expected: the id
    output = [
        Record(
            topic="out",
            partition=0,
            offset=i,
            key=None,
            value=f'{{"id": {i}, "key": "k"}}'.encode(),
        )
        for i in range(4)
    ]
    inputs = expected_records(id_range("0:4"))
    assert {r.topic for r in inputs} == {EXPECTED}
    scan = {0: PartitionScan(partition=0, high_watermark=4, last_stable_offset=4)}
    ok = analyze(inputs, output, output, scans=scan, committed_ends={0: 4}, identity=ident)
    assert ok.ok, ok
    short = expected_records(id_range("1:6"))
    bad = analyze(short, output, output, scans=scan, committed_ends={0: 4}, identity=ident)
    assert bad.count(AnomalyKind.LOST) == 2 and bad.count(AnomalyKind.UNKNOWN) == 1


def test_an_expected_set_checks_an_append_table() -> None:
    rows = [TableRow(str(i), "") for i in (0, 1, 1, 3)]
    report = analyze_table(
        expected_records(range(4)), rows, write_mode="append", identity=with_expected(kafka_key_id)
    )
    assert report.count(AnomalyKind.LOST) == 1 and report.count(AnomalyKind.DUPLICATE) == 1


def kafka_key_id(record: Record) -> RecordIdentity:  # never called: every input is expected
    raise AssertionError(record)


@pytest.mark.parametrize("text", ["", "5", "a:3", "3:1", "0:x", "1:2:3"])
def test_a_range_that_does_not_parse_is_an_option_error(text: str) -> None:
    with pytest.raises(IdentityOptionError, match="START:END"):
        id_range(text)


def test_ids_in_a_file_and_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "ids.txt"
    path.write_text("7\n\n  8 \nabc\n")
    assert ids_in_file(str(path)) == ["7", "8", "abc"]
    with pytest.raises(IdentityOptionError, match="cannot read"):
        ids_in_file(str(tmp_path / "none.txt"))
