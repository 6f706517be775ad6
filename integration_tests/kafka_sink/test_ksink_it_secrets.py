"""Secrets never leak: a sentinel password is nowhere the kit writes, logs, shows or stores.

The sink, the source and the checker run with a ``client_config`` holding a unique sentinel
in its secret settings (``sasl.password``, ``ssl.key.password``; with
``security.protocol=PLAINTEXT`` librdkafka accepts and ignores them, so the suite's
plaintext broker serves every client). Epochs run, one fails on purpose (an injected fault)
and one on a record too large; then the sentinel is looked for in: every log record of the
run (the kit's loggers and librdkafka's, at DEBUG), the metrics, the failures' messages and
tracebacks, the reprs of the config, the cluster, the epoch plans and the votes, the raw
contents of every topic the run wrote (read_uncommitted) and the markers' committed
metadata, and, for a whole Spark application reading with the ``kafka-rc`` source, its
checkpoint directory, its work files and its stderr (Spark's and the Python workers' logs).
What crosses to Spark tasks must still carry the secret (pickled, it is whole).
"""

from __future__ import annotations

import json
import logging
import pickle
import traceback
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from pyspark.sql import functions as F  # noqa: N812

from connectors.demo.app import AppProcess, PipelineConfig
from connectors.demo.app._config import SOURCE_KAFKA
from connectors.kafka import KafkaCode, KafkaConnectorError, KafkaEpochLog, KafkaSink
from connectors.kafka._client import _clients, _names, cluster_of
from connectors.kafka._source import spark_has_source_api
from connectors.testing import FaultPlan, inject_faults
from connectors.verify import produce_input, read_topic

SENTINEL = f"SENTINEL-{uuid.uuid4().hex}"
CLIENT_CONFIG = {
    "security.protocol": "PLAINTEXT",
    "sasl.username": "eos-user",
    "sasl.password": SENTINEL,
    "ssl.key.password": SENTINEL,
    "client.id": "secrets-test",
}
# Seconds a whole Spark application may take on a busy machine.
APP_TIMEOUT_S = 600.0


def leaks(texts: Iterable[str]) -> list[str]:
    return [t[:300] for t in texts if SENTINEL in t]


def raw_topic_texts(bootstrap: str, topics: Iterable[str]) -> list[str]:
    """Keys and values of every record, committed or not, as text."""
    out = []
    for topic in topics:
        for r in read_topic(bootstrap, topic, isolation="read_uncommitted"):
            out += [
                (r.key or b"").decode(errors="replace"),
                (r.value or b"").decode(errors="replace"),
            ]
    return out


def marker_metadata(bootstrap: str, sink_id: str, marker_topic: str, width: int) -> list[str]:
    """The raw metadata each marker group committed (what a marker stores)."""
    out = []
    for p in range(width):
        consumer = _clients.consumer(
            cluster_of(bootstrap, CLIENT_CONFIG), {"group.id": _names.marker_group(sink_id, p)}
        )
        try:
            (tp,) = consumer.committed([TopicPartition(marker_topic, 0)], timeout=30)
            assert tp.offset == 2, tp  # epoch 1's marker: the read saw what a marker stores
            out.append(f"{tp.offset} {tp.metadata}")
        finally:
            consumer.close()
    return out


def rows(spark: Any, n: int, start: int = 0) -> Any:
    return spark.range(start, start + n).selectExpr(
        "concat('k', CAST(id % 7 AS STRING)) AS key", "CAST(id AS STRING) AS value"
    )


def failure_text(call: Callable[[], Any]) -> str:
    with pytest.raises(Exception) as info:
        call()
    return "".join(traceback.format_exception(info.value))


def record_too_large(spark: Any, cfg: Any) -> str:
    """The failure text of another sink of the same settings writing a record too large."""
    other = KafkaSink(
        cfg.bootstrap_servers,
        cfg.topic,
        f"{cfg.sink_id}-big",
        client_config=CLIENT_CONFIG,
        producer_config={"message.max.bytes": 20_000},
        epoch_log_topic=cfg.epoch_log_topic,
        marker_topic=cfg.marker_topic,
        parallelism=2,
    )
    big = rows(spark, 20).withColumn("value", F.repeat(F.lit("x"), 50_000))
    try:
        with pytest.raises(
            KafkaConnectorError, check=lambda e: e.code is KafkaCode.RECORD_TOO_LARGE
        ) as info:
            other(big, 0)
        return "".join(traceback.format_exception(info.value)) + repr(other.metrics())
    finally:
        other.close()


def test_a_sentinel_password_never_leaks_from_the_sink(
    spark: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    kafka_admin: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    suffix = uuid.uuid4().hex[:8]
    topic, sink_id = new_topic("sec-out", 2), f"sec-{suffix}"
    log_topic, marker_topic = f"sec-log-{suffix}", f"sec-markers-{suffix}"
    faults = tmp_path / "faults.json"
    faults.write_text(
        json.dumps(
            [{"id": "f", "step": "after_pre_commit", "epoch": 2, "partition": 0, "action": "raise"}]
        )
    )
    sink = KafkaSink(
        kafka_bootstrap,
        topic,
        sink_id,
        client_config={**CLIENT_CONFIG, "debug": "security"},
        epoch_log_topic=log_topic,
        marker_topic=marker_topic,
        parallelism=2,
        stage_retries=0,
    )
    texts: list[str] = []
    try:
        results = [sink(rows(spark, 50), 0), sink(rows(spark, 50, 50), 1)]
        assert all(r.committed for r in results)
        # Before the failure: its open transaction holds the markers' offsets unstable.
        texts += marker_metadata(kafka_bootstrap, sink_id, marker_topic, 2)
        with inject_faults(FaultPlan(str(faults))) as plan:
            texts.append(failure_text(lambda: sink(rows(spark, 50, 100), 2)))
        assert plan.has_fired("f"), "epoch 2 never failed: its error text was not checked"
        texts += [repr(r) for r in results] + [repr(v) for r in results for v in r.reports]
        texts += [m.to_json() for m in sink.metrics()] + [repr(sink.metrics())]
        cfg = sink.config
        texts += [repr(cfg), str(cfg), repr(cfg.cluster), str(cfg.client_config)]
        # Pickled (to the executors) the config is whole: the tasks need the password.
        assert SENTINEL.encode() in pickle.dumps(cfg)
    finally:
        sink.close()
    texts.append(record_too_large(spark, sink.config))
    history = KafkaEpochLog(
        kafka_bootstrap, sink_id, topic=log_topic, client_config=CLIENT_CONFIG
    ).load()
    texts += [repr(history)] + [repr(r) for r in history.records]
    texts += raw_topic_texts(kafka_bootstrap, [topic, log_topic, marker_topic])
    internal = [t for t in kafka_admin.list_topics(timeout=30).topics if t.startswith("__")]
    texts += raw_topic_texts(kafka_bootstrap, internal)
    texts += [r.getMessage() for r in caplog.records] + [caplog.text]
    assert any("secrets-test" in t for t in [repr(cfg)])  # the checks see the config at all
    assert len(caplog.records) > 10, "the capture saw no log lines: it would prove nothing"
    assert not leaks(texts), leaks(texts)


@pytest.mark.spark
@pytest.mark.skipif(not spark_has_source_api(), reason="the app reads with kafka-rc: PySpark 4.2+")
def test_a_sentinel_password_never_leaks_from_a_spark_application(
    kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    input_topic, output_topic = new_topic("sec-app-in", 2), new_topic("sec-app-out", 2)
    produce_input(kafka_bootstrap, input_topic, 200, client_config=CLIENT_CONFIG)
    cfg = PipelineConfig(
        bootstrap=kafka_bootstrap,
        input_dir=str(tmp_path / "unused"),
        checkpoint=str(tmp_path / "checkpoint"),
        output_topic=output_topic,
        sink_id=f"sec-app-{uuid.uuid4().hex[:8]}",
        source=SOURCE_KAFKA,
        input_topic=input_topic,
        max_offsets_per_trigger=100,
        master="local[2,2]",
        client_config=CLIENT_CONFIG,
    )
    assert SENTINEL not in repr(cfg) and SENTINEL not in cfg.to_json()
    app = AppProcess(cfg, tmp_path / "apps").start()
    code = app.wait(APP_TIMEOUT_S)
    assert code == 0 and app.done, app.short_failure()
    assert sum(line.rows for line in app.epochs) == 200
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any("checkpoint" in p.parts for p in files) and app.stderr_path in files
    assert not [str(p) for p in files if SENTINEL.encode() in p.read_bytes()]
