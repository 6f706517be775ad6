"""The demo's last step: check what the query wrote, print the reports (``__main__`` step 6)."""

from __future__ import annotations

from rich.console import Console

from connectors.demo.app import PipelineConfig
from connectors.demo.app._config import SINK_BOTH, member_ids
from connectors.demo.app._tables import record_op
from connectors.kafka import DEFAULT_EPOCH_LOG_TOPIC
from connectors.verify import (
    check_exactly_once,
    check_table,
    load_history,
    member_history,
    print_report,
)


def verify_outputs(cfg: PipelineConfig, console: Console) -> bool:
    """Check the topic and/or the table the query wrote; print the reports."""
    assert cfg.input_topic is not None  # noqa: S101 - the demo always sets it
    kafka_id, pg_id = member_ids(cfg.sink_id) if cfg.sink == SINK_BOTH else (cfg.sink_id,) * 2
    shared = None
    if cfg.sink == SINK_BOTH:  # one epoch log for both members: each sees its share
        shared = member_history(
            load_history(
                cfg.bootstrap,
                cfg.sink_id,
                None,
                DEFAULT_EPOCH_LOG_TOPIC,
                client_config=cfg.client_config,
            ),
            members=2,
        )
    ok = True
    if cfg.writes_kafka:
        console.print("verifying the topic with read_committed and read_uncommitted readers ...")
        report = check_exactly_once(
            cfg.bootstrap,
            input_topic=cfg.input_topic,
            output_topic=cfg.output_topic,
            sink_id=kafka_id,
            epoch_log=shared,
            client_config=cfg.client_config,
        )
        print_report(report, console)
        ok = report.ok
    if cfg.writes_postgres:
        assert cfg.postgres_dsn and cfg.postgres_table  # noqa: S101 - validated by the config
        console.print(f"verifying table {cfg.postgres_table} ...")
        table = check_table(
            cfg.postgres_dsn,
            table=cfg.postgres_table,
            sink_id=pg_id,
            bootstrap=cfg.bootstrap,
            input_topic=cfg.input_topic,
            write_mode=cfg.postgres_write_mode,
            op_fn=record_op if cfg.postgres_write_mode == "changelog" else None,
            epoch_log=shared,
            client_config=cfg.client_config,
        )
        print_report(table, console)
        ok = ok and table.ok
    return ok
