"""Unit tests of connectors.demo's pipeline pieces shared by the demo, the chaos tests and the soak.

No Kafka and no Spark: configs and epoch lines round-trip, chunk files keep the input order.
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pyarrow.parquet as pq

from connectors.demo import EpochLine, PipelineConfig, write_chunks
from connectors.verify import Record, json_identity, make_input_value


def test_pipeline_config_round_trips_through_json_and_pickle() -> None:
    cfg = PipelineConfig("h:1", "/in", "/ck", "out", "sink", mode="unaligned", parallelism=3,
                         fault_plan="/f.json", producer_config={"linger.ms": "5"})
    assert PipelineConfig.from_json(cfg.to_json()) == cfg
    assert pickle.loads(pickle.dumps(cfg)) == cfg


def test_epoch_line_round_trips_and_ignores_other_lines() -> None:
    line = EpochLine(epoch=4, rows=100, skipped=False, committed=True, seconds=1.5)
    assert EpochLine.parse(line.to_line()) == line
    assert pickle.loads(pickle.dumps(line)) == line
    assert EpochLine.parse("26/11/21 WARN something") is None


def test_write_chunks_keeps_input_order_and_file_age_order(tmp_path: Path) -> None:
    records = [Record("in", i % 2, i // 2, b"k", make_input_value(i, "k", i)) for i in range(25)]
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
    ids = {json_identity(Record("in", 0, 0, None, r["value"])).id for r in rows}
    assert ids == {str(i) for i in range(25)}


def test_kafka_source_config_round_trips_and_bad_sources_are_refused() -> None:
    import pytest

    from connectors.demo import PipelineConfigError

    cfg = PipelineConfig("h:1", "/in", "/ck", "out", "sink", source="kafka",
                         input_topic="in", max_offsets_per_trigger=100)
    assert PipelineConfig.from_json(cfg.to_json()) == cfg
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    with pytest.raises(PipelineConfigError, match="source must be one of"):
        PipelineConfig("h:1", "/in", "/ck", "out", "sink", source="jdbc")
    with pytest.raises(PipelineConfigError, match="needs input_topic"):
        PipelineConfig("h:1", "/in", "/ck", "out", "sink", source="kafka")
    with pytest.raises(PipelineConfigError):
        PipelineConfig("h:1", "/in", "/ck", "out", "sink", source="kafka", input_topic="in",
                       max_offsets_per_trigger=0)
