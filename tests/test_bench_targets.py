"""The issue-23 target lines of the benchmarks and the summary written from them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmarks import _targets, summary
from benchmarks._requests import Request


def req(client: str, api: str, instance: int = 1) -> Request:
    role = client.split(".", 1)[0]
    return Request(0.0, f"{client}#producer-{instance}", role, api)


def test_round_trips_are_the_driver_then_the_slowest_task_with_produce_once():
    reqs = [
        req("log-producer.s.coordinator.1", "AddPartitionsToTxn"),
        req("log-producer.s.coordinator.1", "Produce"),
        req("log-producer.s.coordinator.1", "EndTxn"),
        req("marker-consumer.s.marker.0.7", "OffsetFetch"),
        req("task-producer.s-0.7", "AddPartitionsToTxn"),
        req("task-producer.s-0.7", "Produce"),
        req("task-producer.s-0.7", "Produce"),
        req("task-producer.s-0.7", "EndTxn"),
        req("task-producer.s-1.8", "EndTxn"),
        # a spare of partition 0's id created in the background: not on the critical path
        req("task-producer.s-0.7", "ApiVersion", instance=2),
        req("task-producer.s-0.7", "Metadata", instance=2),
    ]
    # driver 3; partition 0: OffsetFetch, AddPartitionsToTxn, Produce (once), EndTxn = 4
    assert _targets.round_trips(reqs) == 7


def test_setup_requests_count_only_write_task_clients():
    reqs = [
        req("log-producer.s.coordinator.1", "Metadata"),
        req("task-producer.s-0.7", "InitProducerId"),
        req("marker-consumer.s.marker.0.7", "FindCoordinator"),
        req("task-producer.s-0.7", "Produce"),
    ]
    assert _targets.setup_requests(reqs) == 2


def test_target_lines_say_met_not_met_or_not_measured():
    assert _targets.at_least("b", "x >= 0.8", 0.81, 0.8, "x{:.2f}").line().endswith(": MET (x0.81)")
    assert (
        "NOT MET (3.00 per epoch)" in _targets.at_most("b", "none", 3, 0, "{:.2f} per epoch").line()
    )
    assert "NOT MEASURED" in _targets.at_least("b", "x", None, 1, "{}").line()


def test_summary_replaces_only_the_marked_block(tmp_path):
    doc = {
        "command": "python -m benchmarks.bench_job",
        "load_average": {"before": [2.0, 0, 0], "after": [3.5, 0, 0]},
        "targets": _targets.as_dicts(
            [_targets.at_least("bench_job", "eos >= 0.8x arrow-drop", 0.5, 0.8, "x{:.2f}")]
        ),
    }
    (tmp_path / "bench_job.json").write_text(json.dumps(doc))
    (tmp_path / "bench_sink.json").write_text(json.dumps({"summaries": []}))  # no targets
    docs = summary.load(("bench_job", "bench_sink", "bench_source"), tmp_path)
    assert list(docs) == ["bench_job"]
    text = "before\n<!-- targets:start -->\nold\n<!-- targets:end -->\nafter\n"
    new = summary.replace_block(text, "targets", summary.targets_table(docs))
    assert new.startswith("before\n<!-- targets:start -->\n| benchmark | target |")
    assert "| bench_job | eos >= 0.8x arrow-drop | x0.50 | **NOT MET** |" in new
    assert "Runs: `python -m benchmarks.bench_job` (load 2.0 -> 3.5)." in new
    assert new.endswith("<!-- targets:end -->\nafter\n") and "old" not in new
    with pytest.raises(ValueError, match="bench-summary"):
        summary.replace_block(text, "bench-summary", "x")


def test_the_readme_summary_is_one_short_row_per_benchmark_pointing_at_the_details(tmp_path):
    targets = [
        _targets.at_least(
            "bench_sink", "eos >= 0.85x arrow-produce", 0.49, 0.85, "x{:.2f}; x0.58 arrow-drop"
        ),
        _targets.at_most("bench_sink", "set-up requests", 0, 0, "{:.0f} per epoch (median)"),
        _targets.at_most("bench_sink", "round trips", None, 11, "{:.0f}"),
    ]
    doc = {"command": "python -m benchmarks.bench_sink", "targets": _targets.as_dicts(targets)}
    (tmp_path / "bench_sink.json").write_text(json.dumps(doc))
    met = [_targets.at_least("bench_source", "read >= 0.9x", 1.1, 0.9, "x{:.2f}")]
    (tmp_path / "bench_source.json").write_text(json.dumps({"targets": _targets.as_dicts(met)}))
    table = summary.readme_summary(summary.load(("bench_sink", "bench_source"), tmp_path))
    rows = [line for line in table.splitlines() if line.startswith("| bench_")]
    assert rows == [
        "| bench_sink | 1 of 3 | eos >= 0.85x arrow-produce (x0.49) |",
        "| bench_source | 1 of 1 | none |",
    ]
    assert "docs/performance.md" in table.splitlines()[0]


def test_setup_target_is_met_by_a_zero_median_and_shows_the_epochs_with_any():
    counts = _targets.SetupCounts((0, 6, 0, 0, 2))
    target = _targets.setup_target("b", "no set-up", counts, "epoch", "epochs")
    assert (target.value, target.met) == (0.0, True)
    assert target.shown == "0 per epoch (median; mean 1.60, 2 of 5 epochs with any)"
    busy = _targets.setup_target(
        "b", "no set-up", _targets.SetupCounts((4, 0, 7)), "batch", "batches"
    )
    assert (busy.value, busy.met) == (4.0, False)
    assert busy.shown == "4 per batch (median; mean 3.67, 2 of 3 batches with any)"
    assert _targets.setup_target("b", "no set-up", None, "epoch", "epochs").met is None


def test_job_summary_keeps_each_steady_batch_set_up_count_beside_the_ratios():
    from benchmarks._steady import Batch, JobRun, summarize

    def job(variant: str, seconds: float) -> JobRun:
        batches = tuple(Batch(variant, 0, b, b * seconds, (b + 1) * seconds) for b in range(4))
        return JobRun(variant, 0, 0.0, batches)

    eos, alo = job("eos-aligned", 1.0), job("alo-sink", 0.5)
    # eos batch 2 (ends at 3.0) has an InitProducerId from a write task; batch 3 none
    reqs = [Request(2.5, "task-producer.s-0.7#producer-1", "task-producer", "InitProducerId")]
    by = {s.variant: s for s in summarize([eos, alo], 1000, 2, reqs)}
    assert by["eos-aligned"].setup_requests == _targets.SetupCounts((1, 0))
    assert by["eos-aligned"].x_alo == pytest.approx(0.5)


def test_a_ratio_to_arrow_produce_shows_the_ratio_to_arrow_drop_beside_it() -> None:
    with_drop = _targets.at_least(
        "bench_sink", "eos >= 0.85x arrow-produce", 0.84, 0.85, _targets.x_arrow_produce_format(0.5)
    )
    alone = _targets.at_least(
        "bench_sink", "eos >= 0.85x arrow-produce", 0.9, 0.85, _targets.x_arrow_produce_format(None)
    )

    assert with_drop.shown == "x0.84; x0.50 arrow-drop"
    assert with_drop.met is False
    assert alone.shown == "x0.90"
    assert alone.met is True


@pytest.mark.parametrize(
    ("variant", "mode", "keep", "parallelism", "strategy"),
    [
        ("eos-keep", "unaligned", True, None, "pooled"),  # no routing exchange
        ("eos-unaligned", "unaligned", False, 2, "pooled"),
        ("eos-aligned", "aligned", False, 2, "pooled"),
        ("eos-aligned-ref", "aligned", False, 2, "reference"),
        ("eos-unaligned-ref", "unaligned", False, 2, "reference"),
    ],
)
def test_the_sink_variants_are_built_with_their_mode_and_partitioning(
    variant, mode, keep, parallelism, strategy, monkeypatch
) -> None:
    from benchmarks import _job

    monkeypatch.setattr(_job, "AdminClient", lambda conf: object())  # topics: not created
    monkeypatch.setattr(_job.Writers, "_new_topic", lambda self, name: f"bench-{name}")
    writers = _job.Writers("127.0.0.1:1", [variant])  # sinks validate without I/O
    (sink,) = writers._sinks
    assert str(sink.config.mode.value) == mode
    assert sink.config.keep_partitioning is keep
    assert sink.config.parallelism == parallelism
    assert sink.config.producer_strategy.value == strategy
    if variant not in ("eos-aligned", "eos-unaligned"):  # on request only
        assert variant not in _job.VARIANTS and variant in _job.ALL_VARIANTS


def test_variants_option_defaults_to_the_standard_variants_and_refuses_unknown_ones() -> None:
    import argparse

    from benchmarks import _job

    parser = argparse.ArgumentParser()
    _job.add_variants_option(parser)
    args = parser.parse_args([])
    assert _job.variant_list(parser, args.variants) == list(_job.VARIANTS)
    assert _job.variant_list(parser, " eos-keep, arrow-drop ") == ["eos-keep", "arrow-drop"]
    with pytest.raises(SystemExit):
        _job.variant_list(parser, "eos-aligned,no-such-variant")


def _growth_point(partitions: int, aligned: float, unaligned: float, write_tasks: int = 2) -> Any:
    from benchmarks.bench_growth import SinkPoint

    return SinkPoint(
        partitions=partitions,
        write_tasks=write_tasks,
        alo_ms=200.0,
        overhead_ms={"eos-aligned": aligned, "eos-unaligned": unaligned},
    )


def test_growth_target_is_the_slope_not_the_fixed_cost_per_partition():
    from benchmarks.bench_growth import targets

    # A fixed 40 ms per epoch at every size grows by nothing; 2 ms per partition does.
    sinks = [
        _growth_point(4, 40.0, 40.0 + 2 * 4),
        _growth_point(512, 40.0, 40.0 + 2 * 512),
        _growth_point(32, 999.0, float("nan"), write_tasks=8),  # not the partition series
    ]
    by_variant = {t.name.split(" ", 1)[0]: t for t in targets(sinks)}
    assert by_variant["eos-aligned"].value == pytest.approx(0.0)
    assert by_variant["eos-aligned"].met is True
    assert by_variant["eos-unaligned"].value == pytest.approx(2.0)
    assert by_variant["eos-unaligned"].met is False
    assert "4 -> 512 partitions" in by_variant["eos-unaligned"].name


def test_growth_target_needs_two_partition_counts():
    from benchmarks.bench_growth import targets

    assert targets([_growth_point(32, 10.0, 10.0)]) == []
