"""Unit tests of the range-reading loop and Arrow building, with a fake consumer."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest

from connectors._arrow_schema import arrow_schema as spark_arrow_schema
from connectors.kafka import KafkaCode, KafkaConnectorError
from connectors.kafka._source import (
    OffsetRange,
    SourceOptions,
    _consumers,
    _fetch,
    _options,
    arrow_schema,
    spark_schema,
)
from connectors.kafka._source._arrow import build_batch
from connectors.kafka._source._spark_api import spark_has_source_api

from ._fakes import FakeConsumer, FakeLog, FakeMessage


@pytest.fixture(autouse=True, params=[0, 64], ids=["one-consumer-per-read", "reuse"])
def cache_capacity(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every read runs on both paths: the reference (capacity 0) and consumer reuse."""
    monkeypatch.setattr(_options, "DEFAULT_CONSUMER_CACHE_CAPACITY", request.param)
    return int(request.param)


def options(**extra: str) -> SourceOptions:
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    return SourceOptions.from_options({**base, **extra})


@pytest.mark.parametrize("headers", [False, True])
def test_arrow_schema_is_what_spark_expects(headers: bool) -> None:
    # What Spark's Arrow batches carry for the source's Spark schema (its readers run in UTC).
    assert arrow_schema(headers).equals(spark_arrow_schema(spark_schema(headers), timezone="UTC"))
    names = [f.name for f in spark_schema(headers).fields]
    expected = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert names == expected + (["headers"] if headers else [])


def test_build_batch_columns() -> None:
    msgs = [
        FakeMessage(5, b"a", b"k", (1, 1_000), [("h", b"x"), ("n", None)]),
        FakeMessage(6, None, None, (2, 2_500), None),
        FakeMessage(9, b"", None, (0, -1), []),
    ]
    batch = build_batch(msgs, "topic-1", 3, arrow_schema(True))
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == [5, 6, 9]
    assert [r["value"] for r in rows] == [b"a", None, b""]
    assert [r["key"] for r in rows] == [b"k", None, None]
    assert {r["topic"] for r in rows} == {"topic-1"} and {r["partition"] for r in rows} == {3}
    assert [r["timestampType"] for r in rows] == [0, 1, -1]  # Java TimestampType ids
    assert rows[0]["timestamp"].timestamp() == 1.0
    assert rows[1]["timestamp"].timestamp() == 2.5
    assert rows[0]["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert rows[1]["headers"] is None and rows[2]["headers"] is None  # like Spark
    assert batch.schema.equals(arrow_schema(True))


def read_with(
    log: FakeLog, rng: OffsetRange, monkeypatch: pytest.MonkeyPatch, **extra: str
) -> list[dict[str, Any]]:
    monkeypatch.setattr(_fetch._client, "consumer", lambda _cluster, conf: FakeConsumer(log, conf))
    monkeypatch.setattr(_fetch, "POLL_INTERVAL_S", 0.0)
    batches = list(_fetch.read_range(options(**extra), rng))
    kept = [c for c in log.consumers if not c.closed]  # each kept idle for the next range
    assert len(kept) == _consumers.stats().idle
    return pa.Table.from_batches(batches, arrow_schema(False)).to_pylist() if batches else []


def offsets(rows: list[dict[str, Any]]) -> list[int]:
    return [r["offset"] for r in rows]


def test_range_ending_on_control_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0..2 committed data, 3 commit marker; range [0,4) ends on the marker
    log = FakeLog({0: "data", 1: "data", 2: "data", 3: "ctrl"}, lso=4)
    assert offsets(
        read_with(log, OffsetRange(topic="t", partition=0, start=0, end=4), monkeypatch)
    ) == [0, 1, 2]


def test_range_entirely_aborted(monkeypatch: pytest.MonkeyPatch) -> None:
    log = FakeLog({0: "aborted", 1: "aborted", 2: "ctrl", 3: "data"}, lso=4)
    assert read_with(log, OffsetRange(topic="t", partition=0, start=0, end=3), monkeypatch) == []


def test_data_beyond_end_is_not_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    log = FakeLog({i: "data" for i in range(100)}, lso=100)
    assert offsets(
        read_with(log, OffsetRange(topic="t", partition=0, start=10, end=20), monkeypatch)
    ) == list(range(10, 20))


def test_consumer_config_is_read_committed(monkeypatch: pytest.MonkeyPatch) -> None:
    log = FakeLog({0: "data"}, lso=1)
    read_with(log, OffsetRange(topic="t", partition=0, start=0, end=1), monkeypatch)
    conf = log.consumers[0].conf
    assert conf["isolation.level"] == "read_committed"
    assert conf["enable.auto.commit"] == "false" and conf["auto.offset.reset"] == "error"


def test_empty_range_opens_no_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    log = FakeLog({}, lso=0)
    assert read_with(log, OffsetRange(topic="t", partition=0, start=5, end=5), monkeypatch) == []
    assert log.consumers == []


def test_deleted_start_fails_or_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    log = FakeLog({i: "data" for i in range(10)}, lso=10, log_start=6)
    with pytest.raises(
        KafkaConnectorError, match="failOnDataLoss", check=lambda e: e.code is KafkaCode.DATA_LOSS
    ):
        read_with(log, OffsetRange(topic="t", partition=0, start=2, end=8), monkeypatch)
    rows = read_with(
        log,
        OffsetRange(topic="t", partition=0, start=2, end=8),
        monkeypatch,
        failOnDataLoss="false",
    )
    assert offsets(rows) == [6, 7]
    rows = read_with(
        log,
        OffsetRange(topic="t", partition=0, start=0, end=4),
        monkeypatch,
        failOnDataLoss="false",
    )
    assert rows == []


def test_stall_raises_timeout_instead_of_waiting_forever(monkeypatch: pytest.MonkeyPatch) -> None:
    # the range asks for offsets the consumer can never reach (LSO stuck at 2)
    log = FakeLog({0: "data", 1: "data", 2: "data"}, lso=2)
    with pytest.raises(
        KafkaConnectorError, match="pollTimeoutMs", check=lambda e: e.code is KafkaCode.READ_TIMEOUT
    ):
        read_with(
            log,
            OffsetRange(topic="t", partition=0, start=0, end=3),
            monkeypatch,
            **{"kafkaConsumer.pollTimeoutMs": "200"},
        )


def test_large_range_yields_several_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    n = _fetch.ARROW_BATCH_ROWS * 2 + 7
    log = FakeLog({i: "data" for i in range(n)}, lso=n)
    monkeypatch.setattr(_fetch._client, "consumer", lambda _cluster, conf: FakeConsumer(log, conf))
    batches = list(
        _fetch.read_range(options(), OffsetRange(topic="t", partition=0, start=0, end=n))
    )
    assert len(batches) == 3
    assert all(b.num_rows <= _fetch.ARROW_BATCH_ROWS for b in batches)
    assert sum(b.num_rows for b in batches) == n
    col = pa.concat_arrays([b.column("offset") for b in batches]).to_pylist()
    assert col == list(range(n))


@pytest.mark.skipif(not spark_has_source_api(), reason="the reader classes need PySpark 4.2+")
def test_reader_objects_pickle() -> None:
    from connectors.kafka._source import KafkaRcDataSource

    ds = KafkaRcDataSource({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})
    reader = ds.streamReader(ds.schema())
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._options == reader._options
    assert pickle.loads(pickle.dumps(ds)).source_options == ds.source_options
