"""Every exit of ``eos`` ends with a footer naming its own cause (issue 35).

Each case makes one failure happen for real (a log file, a topic, a database query) and
reads the last line ``eos`` prints: ``exit code N: CAUSE``. A footer that listed every
cause of its code (the unknown-column error once ended under "the cluster or the epoch
log could not be read") fails these. No Spark: topics are written by a plain producer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from connectors.ops import main
from txn import EpochCompletion, EpochPlan, FileEpochLog

# Seconds for the producer's flush.
FLUSH_TIMEOUT_S = 30.0


def footer(capsys: Any, argv: list[str]) -> tuple[int, str, dict[str, Any]]:
    """Run ``eos`` twice: as a user reads it (the last line) and with ``--json``."""
    capsys.readouterr()
    code = main(argv)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert main(["--json", *argv]) == code
    return code, lines[-1], json.loads(capsys.readouterr().out)


def file_log(tmp_path: Path, sink_id: str, *records: Any) -> str:
    path = tmp_path / f"{uuid.uuid4().hex[:6]}.log"
    with FileEpochLog(path, sink_id=sink_id) as log:
        for record in records:
            log.append(record)
    return str(path)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, value, key)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0


def test_each_kafka_side_failure_has_its_own_footer(
    kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path, capsys: Any
) -> None:
    sink = f"eos-f-{uuid.uuid4().hex[:8]}"
    done = [
        EpochPlan(sink_id=sink, epoch=0, parallelism=1, fingerprint="fp"),
        EpochCompletion(sink, 0, committed=True),
    ]
    healthy = file_log(tmp_path, sink, *done)
    in_doubt = file_log(
        tmp_path, sink, *done, EpochPlan(sink_id=sink, epoch=1, parallelism=1, fingerprint="fp")
    )
    raw, empty = new_topic("eos-f-raw", 1), new_topic("eos-f-empty", 1)
    produce(kafka_bootstrap, raw, [(b"k", b"not json")])
    k = ["--bootstrap-servers", kafka_bootstrap]
    cases: list[tuple[list[str], int, str]] = [
        ([*k, "status", sink, "--epoch-log", healthy], 0, "done"),
        ([*k, "status", sink, "--epoch-log", in_doubt], 1, "epoch in doubt"),
        (
            [*k, "verify", "--expected-range", "0:3", "--output-topic", empty],
            1,
            "the check found anomalies",
        ),
        (
            [*k, "verify", "--input-topic", raw, "--table", "t", "--dead-letter-topic", "d"],
            2,
            "bad arguments",
        ),
        (
            [*k, "verify", "--expected-range", "9:1", "--output-topic", empty],
            2,
            "expected-set option",
        ),
        (
            [*k, "verify", "--input-topic", raw, "--output-topic", raw],
            2,
            "records that do not fit",
        ),
        (
            [*k, "status", sink, "--epoch-log", str(tmp_path / "missing.log")],
            3,
            "unknown sink",
        ),
        (
            [*k, "status", sink, "--epoch-log", "postgresql://u:pw@db.example/app"],
            4,
            "PostgreSQL connection string given as --epoch-log",
        ),
        ([*k, "offsets", sink, "--epoch-log", healthy], 4, "input is not Kafka"),
        ([*k, "reset", sink, "--epoch-log", in_doubt], 4, "the reset was refused"),
    ]
    for argv, code, cause in cases:
        got, last, doc = footer(capsys, argv)
        assert (got, last) == (code, f"exit code {code}: {doc['cause']}"), (argv, last)
        assert cause in doc["cause"], (argv, doc)


def test_each_postgres_failure_has_its_own_footer(
    postgres_dsn: str, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("POSTGRES_DSN", raising=False)
    table = ["verify", "--table", "t", "--sink-id", f"eos-f-{uuid.uuid4().hex[:8]}"]
    gone = "host=127.0.0.1 port=1 dbname=none connect_timeout=5"
    cases: list[tuple[list[str], int, str]] = [
        (
            [*table, "--dsn", postgres_dsn, "--expected-query", "SELECT id FROM no_such_table"],
            2,
            "no such table or column",
        ),
        ([*table, "--dsn", postgres_dsn, "--expected-query", "SELEKT 1"], 2, "syntax"),
        ([*table, "--dsn", gone, "--expected-query", "SELECT 1"], 3, "could not be reached"),
        ([*table, "--dsn", postgres_dsn, "--expected-range", "0:3"], 3, "unknown sink"),
        ([*table, "--expected-range", "0:3"], 2, "bad arguments"),  # no --dsn
    ]
    for argv, code, cause in cases:
        got, last, doc = footer(capsys, argv)
        assert (got, last) == (code, f"exit code {code}: {doc['cause']}"), (argv, last)
        assert cause in doc["cause"], (argv, doc)
