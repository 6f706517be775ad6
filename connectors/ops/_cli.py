"""Argument parsing, rendering and exit codes of ``eos`` (commands in ``_commands``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaException
from rich.console import Console
from rich.table import Table

from connectors.kafka import DEFAULT_EPOCH_LOG_TOPIC, DEFAULT_MARKER_TOPIC, PreflightError
from connectors.ops import _commands as cmd
from connectors.testing.verify import VerifyError
from txn import EpochLogError, TxnError

EXIT_CODES = {
    cmd.OK: "done; the sink is healthy / no anomaly",
    cmd.PROBLEM: "a check found a problem (anomalies, an epoch in doubt, a failed preflight)",
    cmd.USAGE: "bad arguments",
    cmd.UNAVAILABLE: "the cluster or the epoch log could not be read",
    cmd.REFUSED: "the command was refused (reset with an epoch in doubt)",
}
# Transaction timeout preflight checks when none is given: KafkaSink's default, in ms.
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eos", description="Operate exactly-once sinks of the "
                                "kit (docs/operations.md).", epilog="exit codes: " + "; ".join(
        f"{c} {what}" for c, what in EXIT_CODES.items()))
    p.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
                   help="Kafka bootstrap address (default: $KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    sub = p.add_subparsers(dest="command", required=True)

    def sink_command(name: str, text: str) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=text, description=text)
        s.add_argument("sink_id")
        s.add_argument("--epoch-log", help="the sink's FileEpochLog path (default: Kafka log)")
        s.add_argument("--epoch-log-topic", default=DEFAULT_EPOCH_LOG_TOPIC)
        s.add_argument("--marker-topic", default=DEFAULT_MARKER_TOPIC)
        return s

    s = sink_command("status", "epochs, binding, markers and open transactions of a sink")
    s.add_argument("--topic", action="append", default=[], help="output topic to inspect")
    s.add_argument("--scan", action="store_true",
                   help="also list open transactions by a raw scan of the output topics")
    s = sink_command("abort-lingering", "abort open transactions of the sink's ids")
    s.add_argument("--parallelism", type=int, help="ids 0..N-1 at least (default: the log's)")
    s.add_argument("--dry-run", action="store_true")
    s = sink_command("reset", "bind the sink to a new query (a new checkpoint) on purpose")
    s.add_argument("--query", help="the new query's id (default: whichever query writes next)")
    s = sub.add_parser("preflight", help="check a cluster for a sink before starting it")
    s.add_argument("--topic", action="append", default=[], help="topic the sink needs")
    s.add_argument("--sink-id", help="list the ids and groups this sink will use")
    s.add_argument("--parallelism", type=int, default=2)
    s.add_argument("--transaction-timeout-ms", type=int, default=DEFAULT_TRANSACTION_TIMEOUT_MS)
    s = sub.add_parser("verify", help="check exactly-once output against its input")
    s.add_argument("--input-topic", required=True)
    s.add_argument("--output-topic", required=True)
    s.add_argument("--sink-id", help="also check the sink's epoch log against its markers")
    s.add_argument("--epoch-log")
    s.add_argument("--epoch-log-topic", default=DEFAULT_EPOCH_LOG_TOPIC)
    return p


def _run(args: argparse.Namespace) -> cmd.Result:
    if args.command in ("status", "abort-lingering", "reset"):
        ref = cmd.SinkRef(args.bootstrap_servers, args.sink_id, args.epoch_log,
                          args.epoch_log_topic, args.marker_topic)
        if args.command == "status":
            return cmd.status(ref, args.topic, args.scan)
        if args.command == "abort-lingering":
            return cmd.abort_lingering(ref, args.parallelism, args.dry_run)
        return cmd.reset(ref, args.query)
    if args.command == "preflight":
        return cmd.preflight(args.bootstrap_servers, args.topic, args.sink_id, args.parallelism,
                             args.transaction_timeout_ms)
    return cmd.verify(args.bootstrap_servers, args.input_topic, args.output_topic, args.sink_id,
                      args.epoch_log, args.epoch_log_topic)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``eos`` with ``argv`` (default: the command line); return the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad arguments, 0 on --help
        return int(exc.code or 0)
    if not args.bootstrap_servers:
        print("eos: --bootstrap-servers (or $KAFKA_BOOTSTRAP_SERVERS) is required",
              file=sys.stderr)
        return cmd.USAGE
    try:
        result = _run(args)
    except (PreflightError, EpochLogError, VerifyError, KafkaException) as exc:
        result = cmd.Result({"error": f"{type(exc).__name__}: {exc}"}, cmd.UNAVAILABLE,
                            [str(exc)])
    except TxnError as exc:
        result = cmd.Result({"error": f"{type(exc).__name__}: {exc}"}, cmd.REFUSED, [str(exc)])
    _render(args, result)
    return result.code


def _render(args: argparse.Namespace, result: cmd.Result) -> None:
    if args.json:
        doc = {"command": args.command, "exit_code": result.code, "problems": result.problems,
               **result.data}
        print(json.dumps(doc, indent=2, sort_keys=True, default=str))
        return
    console = Console()
    table = Table(title=f"eos {args.command}", show_header=True)
    table.add_column("item")
    table.add_column("value")
    for key, value in result.data.items():
        table.add_row(key, _cell(value))
    console.print(table)
    for problem in result.problems:
        console.print(f"[red]problem:[/] {problem}")
    console.print(f"exit code {result.code}: {EXIT_CODES[result.code]}")


def _cell(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, indent=1, default=str)
    return str(value)
