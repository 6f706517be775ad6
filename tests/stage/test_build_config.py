"""``build_config``: one way for every sink config to turn bad options into its own error."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.kafka import KafkaConnectorError, SinkConfig
from connectors.postgres import PostgresSinkConfig, PostgresSinkError
from txn import TxnCode, TxnError

CASES = [
    (SinkConfig.create, KafkaConnectorError, "KafkaSink"),
    (PostgresSinkConfig.build, PostgresSinkError, "PostgresSink"),
]
REQUIRED = {
    "KafkaSink": {"bootstrap_servers": "127.0.0.1:9092", "topic": "t", "sink_id": "s"},
    "PostgresSink": {"dsn": "host=127.0.0.1", "table": "t", "sink_id": "s"},
}


@pytest.mark.parametrize(("build", "error", "sink"), CASES)
def test_unknown_option_names_the_sink_and_lists_the_options(build, error, sink) -> None:
    with pytest.raises(
        error,
        check=lambda e: e.code is TxnCode.CONFIG,
        match=rf"unknown {sink} option\(s\) \['no_such'\]; the options",
    ):
        build(no_such=1)


@pytest.mark.parametrize(("build", "error", "sink"), CASES)
def test_a_misspelt_option_is_answered_with_the_nearest_name(build, error, sink) -> None:
    with pytest.raises(error, match=r"did you mean 'parallelism' for 'paralelism'\?"):
        build(**REQUIRED[sink], paralelism=2)
    with pytest.raises(error, match=r"did you mean 'stage_retries' for 'stage_retry'\?"):
        build(**REQUIRED[sink], stage_retry=2)


@pytest.mark.parametrize(("build", "error", "sink"), CASES)
def test_missing_required_option_points_to_the_config_class(build, error, sink) -> None:
    with pytest.raises(
        error, check=lambda e: e.code is TxnCode.CONFIG, match=r"see \w*SinkConfig for the options"
    ):
        build()


@pytest.mark.parametrize(("build", "error", "sink"), CASES)
def test_a_bad_stage_option_becomes_the_sinks_own_error(build, error, sink) -> None:
    with pytest.raises(error, check=lambda e: e.code is TxnCode.CONFIG, match="stage_retries"):
        build(**REQUIRED[sink], stage_retries=-1)


def test_checkpoint_location_is_a_non_empty_path_or_none(tmp_path: Any) -> None:
    from connectors.stage import StageOptions

    pass

    assert StageOptions().checkpoint_location is None
    assert StageOptions(checkpoint_location=tmp_path).checkpoint_location == str(tmp_path)
    assert StageOptions(checkpoint_location="s3a://b/ck").checkpoint_location == "s3a://b/ck"
    for bad in ("", "  ", 7):
        with pytest.raises(
            TxnError, match="checkpointLocation", check=lambda e: e.code is TxnCode.CONFIG
        ):
            StageOptions(checkpoint_location=bad)  # type: ignore[arg-type]
