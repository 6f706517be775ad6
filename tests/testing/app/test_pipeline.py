"""Unit tests of connectors.demo's pipeline pieces shared by the demo, the chaos tests and the soak.

No Kafka and no Spark: configs and epoch lines round-trip, chunk files keep the input order.
"""

from __future__ import annotations

import pickle
import random
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from connectors.demo.app import EpochLine, PipelineConfig
from connectors.demo.app._chunks import write_chunks
from connectors.verify import Record, json_identity, make_input_value

# The options every PipelineConfig needs; each test adds the ones it is about.
REQUIRED = {
    "bootstrap": "h:1",
    "input_dir": "/in",
    "checkpoint": "/ck",
    "output_topic": "out",
    "sink_id": "sink",
}


def test_pipeline_config_round_trips_through_json_and_pickle() -> None:
    cfg = PipelineConfig(
        **REQUIRED,
        mode="unaligned",
        parallelism=3,
        fault_plan="/f.json",
        producer_config={"linger.ms": "5"},
    )
    assert PipelineConfig.from_json(cfg.to_json()) == cfg
    assert pickle.loads(pickle.dumps(cfg)) == cfg


def test_epoch_line_round_trips_and_ignores_other_lines() -> None:
    line = EpochLine(epoch=4, rows=100, skipped=False, committed=True, seconds=1.5)
    assert EpochLine.parse(line.to_line()) == line
    assert pickle.loads(pickle.dumps(line)) == line
    assert EpochLine.parse("26/11/21 WARN something") is None


def test_write_chunks_keeps_input_order_and_file_age_order(tmp_path: Path) -> None:
    records = [
        Record(
            topic="in", partition=i % 2, offset=i // 2, key=b"k", value=make_input_value(i, "k", i)
        )
        for i in range(25)
    ]
    random.Random(3).shuffle(records)
    assert write_chunks(records, tmp_path, 10) == 3
    files = sorted(tmp_path.glob("chunk-*.parquet"))
    assert [f.name for f in files] == [f"chunk-{i:06d}.parquet" for i in range(3)]
    mtimes = [f.stat().st_mtime for f in files]
    assert mtimes == sorted(mtimes) and len(set(mtimes)) == 3
    rows = [row for f in files for row in pq.read_table(f).to_pylist()]
    positions = [(r["in_partition"], r["in_offset"]) for r in rows]
    assert positions == sorted(positions) and len(rows) == 25
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind
    ids = {
        json_identity(Record(topic="in", partition=0, offset=0, key=None, value=r["value"])).id
        for r in rows
    }
    assert ids == {str(i) for i in range(25)}


def test_kafka_source_config_round_trips_and_bad_sources_are_refused() -> None:
    from connectors.demo.app import PipelineConfigError

    cfg = PipelineConfig(
        **REQUIRED,
        source="kafka",
        input_topic="in",
        max_offsets_per_trigger=100,
    )
    assert PipelineConfig.from_json(cfg.to_json()) == cfg
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    with pytest.raises(PipelineConfigError, match="source must be one of"):
        PipelineConfig(
            **REQUIRED,
            source="jdbc",
        )
    with pytest.raises(PipelineConfigError, match="needs input_topic"):
        PipelineConfig(
            **REQUIRED,
            source="kafka",
        )
    with pytest.raises(PipelineConfigError):
        PipelineConfig(
            **REQUIRED,
            source="kafka",
            input_topic="in",
            max_offsets_per_trigger=0,
        )


PG = {"postgres_dsn": "host=db dbname=app", "postgres_table": "t"}


def test_postgres_sink_fields_round_trip_and_bad_ones_are_refused() -> None:
    from connectors.demo.app import PipelineConfigError

    cfg = PipelineConfig(
        bootstrap="h:1",
        input_dir="/in",
        checkpoint="/ck",
        output_topic="",
        sink_id="sink",
        sink="postgres",
        postgres_write_mode="changelog",
        postgres_protocol="two-phase",
        **PG,
    )
    assert PipelineConfig.from_json(cfg.to_json()) == cfg
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    assert (cfg.writes_kafka, cfg.writes_postgres) == (False, True)
    both = PipelineConfig(
        **REQUIRED,
        sink="kafka+postgres",
        **PG,
    )
    assert (both.writes_kafka, both.writes_postgres) == (True, True)
    with pytest.raises(PipelineConfigError, match="sink must be one of"):
        PipelineConfig(
            **REQUIRED,
            sink="jdbc",
        )
    with pytest.raises(PipelineConfigError, match="needs postgres_dsn and postgres_table"):
        PipelineConfig(
            **REQUIRED,
            sink="postgres",
        )
    with pytest.raises(PipelineConfigError, match="postgres_write_mode must be one of"):
        PipelineConfig(
            **REQUIRED,
            sink="postgres",
            postgres_write_mode="merge",
            **PG,
        )
    with pytest.raises(PipelineConfigError, match="postgres_protocol must be one of"):
        PipelineConfig(
            **REQUIRED,
            sink="postgres",
            postgres_protocol="3pc",
            **PG,
        )
    with pytest.raises(PipelineConfigError, match="on_bad_record must be one of"):
        PipelineConfig(
            **REQUIRED,
            on_bad_record="ignore",
        )


def test_build_sink_builds_the_sink_of_each_kind_without_network_io() -> None:
    from connectors.demo.app._config import member_ids
    from connectors.demo.app._pipeline import build_sink
    from connectors.kafka import KafkaSink
    from connectors.postgres import PostgresSink
    from connectors.stage import CompositeSink

    kafka = build_sink(
        PipelineConfig(
            bootstrap="h:1", input_dir="/in", checkpoint="/ck", output_topic="out", sink_id="s1"
        )
    )
    assert isinstance(kafka, KafkaSink)
    pg = build_sink(
        PipelineConfig(
            bootstrap="h:1",
            input_dir="/in",
            checkpoint="/ck",
            output_topic="",
            sink_id="s2",
            sink="postgres",
            postgres_write_mode="upsert",
            postgres_protocol="idempotency-table",
            parallelism=3,
            **PG,
        )
    )
    assert isinstance(pg, PostgresSink)
    cfg = pg.config
    assert (cfg.sink_id, cfg.table, cfg.key_columns, cfg.parallelism) == ("s2", "t", ("key",), 3)
    assert (cfg.write_mode.value, cfg.commit_protocol.value) == ("upsert", "idempotency-table")
    assert cfg.order_by == ("in_partition", "in_offset")
    assert cfg.on_bad_record == "fail"
    policy = {"on_bad_record": "dead-letter"}
    dead = build_sink(
        PipelineConfig(
            bootstrap="h:1",
            input_dir="/in",
            checkpoint="/ck",
            output_topic="out",
            sink_id="s4",
            sink="postgres",
            **policy,
            **PG,
        )
    )
    assert isinstance(dead, PostgresSink) and dead.config.dead_letter_table == "dead_letters"
    kafka_dead = build_sink(
        PipelineConfig(
            bootstrap="h:1",
            input_dir="/in",
            checkpoint="/ck",
            output_topic="out",
            sink_id="s5",
            **policy,
        )
    )
    assert isinstance(kafka_dead, KafkaSink) and kafka_dead.config.dead_letter_topic == "out.dlq"
    both = build_sink(
        PipelineConfig(
            bootstrap="h:1",
            input_dir="/in",
            checkpoint="/ck",
            output_topic="out",
            sink_id="s3",
            sink="kafka+postgres",
            mode="unaligned",
            **PG,
        )
    )
    assert isinstance(both, CompositeSink)
    assert both.sink_id == "s3"
    assert both.connector.sink_id == member_ids("s3")[0]  # the Kafka member comes first


@pytest.mark.parametrize("sink", ["kafka", "kafka+postgres"])
def test_the_producer_strategy_reaches_the_kafka_sink_and_a_bad_one_is_refused(sink) -> None:
    from connectors.demo.app import PipelineConfigError
    from connectors.demo.app._pipeline import build_sink
    from connectors.kafka import KafkaSink

    pg = PG if sink != "kafka" else {}
    cfg = PipelineConfig(
        bootstrap="h:1",
        input_dir="/in",
        checkpoint="/ck",
        output_topic="out",
        sink_id="s",
        sink=sink,
        **pg,
    )  # type: ignore[arg-type]
    assert cfg.producer_strategy == "pooled"
    built = build_sink(replace(cfg, producer_strategy="reference"))
    kafka = built.connector
    config = built.config if isinstance(built, KafkaSink) else kafka.options  # type: ignore[attr-defined]
    assert config.producer_strategy.value == "reference"
    assert PipelineConfig.from_json(replace(cfg, producer_strategy="reference").to_json())
    with pytest.raises(PipelineConfigError, match="producer_strategy must be one of"):
        replace(cfg, producer_strategy="fresh")


def test_changelog_op_rule() -> None:
    from connectors.demo.app._tables import changelog_op, record_op

    assert [changelog_op(i, 0) for i in range(5)] == ["insert"] * 4 + ["delete"]
    assert changelog_op(6, 3) == "update_after"
    assert (
        record_op(
            Record(topic="in", partition=0, offset=0, key=b"k", value=make_input_value(9, "k", 2))
        )
        == "delete"
    )


@pytest.mark.parametrize("sink", ["kafka", "kafka+postgres"])
def test_producer_lanes_reach_the_kafka_sink_and_none_keeps_its_default(sink) -> None:
    from connectors.demo.app._pipeline import build_sink
    from connectors.kafka import KafkaSink

    pg = PG if sink != "kafka" else {}
    cfg = PipelineConfig(
        bootstrap="h:1",
        input_dir="/in",
        checkpoint="/ck",
        output_topic="out",
        sink_id="s",
        sink=sink,
        **pg,  # type: ignore[arg-type]
    )

    def lanes(c: PipelineConfig) -> int:
        built = build_sink(c)
        kafka = built.connector
        config = built.config if isinstance(built, KafkaSink) else kafka.options  # type: ignore[attr-defined]
        return int(config.producer_lanes)

    default = lanes(cfg)
    assert cfg.producer_lanes is None and default > 1
    one = replace(cfg, producer_lanes=1)
    assert lanes(one) == 1
    assert PipelineConfig.from_json(one.to_json()) == one
    assert pickle.loads(pickle.dumps(one)) == one
