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

from connectors.kafka import (
    DEFAULT_EPOCH_LOG_TOPIC,
    DEFAULT_MARKER_TOPIC,
    ClientConfigError,
    KafkaAuthenticationError,
    PreflightError,
    _secrets,
)
from connectors.kafka._clients import Cluster
from connectors.kafka._connect import connect_admin
from connectors.kafka._sink._config import DEFAULT_PRODUCER_LANES
from connectors.ops import _commands as cmd
from connectors.ops import _pgcli
from connectors.ops._errors import UnknownSinkError, UnreadableLogError
from connectors.ops._offsets import offsets
from connectors.ops._preflight import SinkPlan, preflight
from connectors.ops._properties import ENV_PREFIX, PropertiesError, command_cluster
from connectors.verify import (
    IdentityFn,
    IdentityOptionError,
    RecordFormatError,
    VerifyError,
    kafka_key,
    load_callable,
    record_identity,
)
from txn import EpochLogError, TxnError

EXIT_CODES = {
    cmd.OK: "done; the sink's log was read and is healthy / no anomaly",
    cmd.PROBLEM: "a check found a problem (anomalies, an epoch in doubt, a failed preflight)",
    cmd.USAGE: "bad arguments (or records that do not fit the verify identity options, or "
    "client settings the cluster refused: authentication failed)",
    cmd.UNAVAILABLE: "the cluster or the epoch log could not be read, or the log holds no "
    "record of the sink id (unknown sink)",
    cmd.REFUSED: "the command was refused (a reset with an epoch in doubt; a log a running "
    "coordinator holds; a PostgreSQL connection string given as --epoch-log)",
}
# Transaction timeout preflight checks when none is given: KafkaSink's default, in ms.
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


def _epilog() -> str:
    return "exit codes: " + "; ".join(f"{c} {what}" for c, what in EXIT_CODES.items())


def _log_options(s: argparse.ArgumentParser) -> None:
    """Add the names a sink lets users change: where its epoch log and markers live."""
    s.add_argument(
        "--epoch-log",
        help="the sink's FileEpochLog path (default: the Kafka epoch log, or with --dsn "
        "the PostgreSQL epoch log table); a PostgreSQL connection string here is refused "
        "(exit 4): pass it as --dsn",
    )
    s.add_argument(
        "--epoch-log-topic",
        default=DEFAULT_EPOCH_LOG_TOPIC,
        action=_pgcli.explicit_topic_action(),
        help="the sink's epoch_log_topic option (default: %(default)s)",
    )
    s.add_argument(
        "--marker-topic",
        default=DEFAULT_MARKER_TOPIC,
        help="the sink's marker_topic option (default: %(default)s)",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eos",
        description="Operate exactly-once sinks of the kit (docs/operations.md).",
        epilog=_epilog(),
    )
    p.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        help="Kafka bootstrap address (default: $KAFKA_BOOTSTRAP_SERVERS)",
    )
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="librdkafka client settings every client of the command uses (security.protocol, "
        "sasl.*, ssl.*, client.id), in the Java properties format of Kafka's own tools; "
        f"over the {ENV_PREFIX}* variables (docs/operations.md)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, epilog=_epilog())

    def sink_command(name: str, text: str) -> argparse.ArgumentParser:
        s = command(name, text)
        s.add_argument("sink_id")
        _log_options(s)
        _pgcli.add_sink_options(s)
        return s

    s = sink_command(
        "status",
        "epochs, binding, markers and open transactions of a sink "
        "(an unknown sink id exits 3, never 'healthy')",
    )
    s.add_argument("--topic", action="append", default=[], help="output topic to inspect")
    s.add_argument(
        "--scan",
        action="store_true",
        help="also list open transactions by a raw scan of the output topics",
    )
    s = sink_command(
        "abort-lingering",
        "abort open transactions of the sink's ids; finish its prepared PostgreSQL "
        "transactions as its epoch log decided",
    )
    s.add_argument("--parallelism", type=int, help="ids 0..N-1 at least (default: the log's)")
    s.add_argument(
        "--lanes",
        type=int,
        default=DEFAULT_PRODUCER_LANES,
        help="producer lanes per partition: the largest producer_lanes the sink ran with",
    )
    s.add_argument("--dry-run", action="store_true")
    sink_command(
        "offsets",
        "the committed input offsets as startingOffsets JSON, and each input partition's lag "
        "(docs/operations.md, 'Changing a query')",
    )
    s = sink_command("reset", "bind the sink to a new query (a new checkpoint) on purpose")
    s.add_argument("--query", help="the new query's id (default: whichever query writes next)")
    s = command("preflight", "check a cluster for a sink before starting it")
    s.add_argument("--topic", action="append", default=[], help="topic the sink needs")
    s.add_argument("--sink-id", help="list the ids, groups and ACLs this sink will use")
    s.add_argument("--parallelism", type=int, default=2)
    s.add_argument(
        "--producer-lanes",
        type=int,
        default=DEFAULT_PRODUCER_LANES,
        help="the sink's producer_lanes (its transactional ids per partition: 1 + lanes)",
    )
    s.add_argument("--transaction-timeout-ms", type=int, default=DEFAULT_TRANSACTION_TIMEOUT_MS)
    s.add_argument("--epoch-log-topic", default=DEFAULT_EPOCH_LOG_TOPIC)
    s.add_argument("--marker-topic", default=DEFAULT_MARKER_TOPIC)
    s = command("verify", "check exactly-once output against its input (docs/testing.md)")
    _verify_options(s)
    _pgcli.add_verify_options(s)
    return p


def _verify_options(s: argparse.ArgumentParser) -> None:
    s.add_argument("--input-topic", required=True)
    output = s.add_mutually_exclusive_group(required=True)
    output.add_argument("--output-topic")
    output.add_argument("--table", help="the table a PostgresSink wrote (with --dsn)")
    s.add_argument("--sink-id", help="also check the sink's epoch log against its markers")
    s.add_argument(
        "--composite-id",
        help="the sink is a member of CompositeSink with "
        "this sink_id: its epoch log is the composite's (needs --members)",
    )
    s.add_argument("--members", type=int, help="members of that composite")
    _log_options(s)
    ident = s.add_mutually_exclusive_group()
    ident.add_argument(
        "--id-field",
        default="id",
        help="dotted path of the unique record id in the JSON value (default: %(default)s)",
    )
    ident.add_argument(
        "--id-fn",
        help="the id as a function of a record, 'pkg.mod:func' "
        "(func(connectors.verify.Record) -> id)",
    )
    order = s.add_mutually_exclusive_group()
    order.add_argument(
        "--order-key-field",
        default="key",
        help="dotted path of the key whose records must keep their order (default: %(default)s)",
    )
    order.add_argument(
        "--order-key-fn", help="the ordering key as a function of a record, 'pkg.mod:func'"
    )
    order.add_argument(
        "--order-by-kafka-key",
        action="store_true",
        help="the ordering key is the record's Kafka key",
    )
    order.add_argument("--no-order-check", action="store_true", help="check no order (ids only)")


def _identity(args: argparse.Namespace) -> IdentityFn:
    id_of: Any = load_callable(args.id_fn) if args.id_fn else args.id_field
    order: Any = args.order_key_field
    if args.order_key_fn:
        order = load_callable(args.order_key_fn)
    elif args.order_by_kafka_key:
        order = kafka_key
    elif args.no_order_check:
        order = None
    return record_identity(id_of, order)


def _run(args: argparse.Namespace, cluster: Cluster) -> cmd.Result:
    connect_admin(cluster)  # first contact: a wrong address or credentials fail fast, typed
    if args.command in ("status", "abort-lingering", "reset", "offsets"):
        ref = cmd.SinkRef(
            cluster,
            args.sink_id,
            args.epoch_log,
            args.epoch_log_topic,
            args.marker_topic,
        )
        if args.command == "status":
            return cmd.status(ref, args.topic, args.scan)
        if args.command == "abort-lingering":
            return cmd.abort_lingering(ref, args.parallelism, args.dry_run, args.lanes)
        if args.command == "offsets":
            return offsets(ref, cluster)
        return cmd.reset(ref, args.query)
    if args.command == "preflight":
        plan = SinkPlan(
            args.topic,
            args.sink_id,
            args.parallelism,
            args.transaction_timeout_ms,
            args.epoch_log_topic,
            args.marker_topic,
            args.producer_lanes,
        )
        return preflight(cluster, plan)
    if (args.composite_id is None) != (args.members is None) or (
        args.composite_id is not None and args.sink_id is None
    ):
        msg = "--composite-id and --members go together, with the member's --sink-id"
        raise IdentityOptionError(msg)
    log = (
        None
        if args.sink_id is None
        else cmd.SinkRef(
            cluster,
            args.composite_id or args.sink_id,
            args.epoch_log,
            args.epoch_log_topic,
            args.marker_topic,
        )
    )
    return cmd.verify(
        cmd.VerifySpec(
            cluster,
            args.input_topic,
            args.output_topic,
            _identity(args),
            log,
            args.sink_id,
            args.members,
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``eos`` with ``argv`` (default: the command line); return the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad arguments, 0 on --help
        return int(exc.code or 0)
    try:
        cluster = _cluster(args)
    except (PropertiesError, ClientConfigError) as exc:
        print(f"eos: {exc}", file=sys.stderr)
        return cmd.USAGE
    try:
        if cluster is None:
            result = _pgcli.run(args, None)
        else:
            result = _pgcli.run(args, cluster) if _pgcli.selects(args) else _run(args, cluster)
    except (IdentityOptionError, RecordFormatError, KafkaAuthenticationError) as exc:
        result = _failed(exc, cmd.USAGE)
    except UnknownSinkError as exc:
        result = _failed(exc, cmd.UNAVAILABLE)
    except UnreadableLogError as exc:
        result = _failed(exc, cmd.REFUSED)
    except (PreflightError, EpochLogError, VerifyError, KafkaException) as exc:
        result = _failed(exc, cmd.UNAVAILABLE)
    except TxnError as exc:
        result = _failed(exc, cmd.REFUSED)
    result = _pgcli.scrub(result, args)
    _render(args, result)
    return result.code


def _cluster(args: argparse.Namespace) -> Cluster | None:
    """Return the Kafka cluster of the command; None for a PostgreSQL-only command with none.

    Raises:
        PropertiesError: no Kafka address where the command needs one, or a bad file.
        ClientConfigError: a setting librdkafka or the kit refuses.

    """
    known = bool(
        args.bootstrap_servers
        or args.command_config
        or any(name.startswith(ENV_PREFIX) for name in os.environ)
    )
    if not known and _pgcli.selects(args) and not _pgcli.needs_bootstrap(args):
        return None
    return command_cluster(args.bootstrap_servers, args.command_config, os.environ)


def _failed(exc: Exception, code: int) -> cmd.Result:
    text = _secrets.scrub(str(exc))  # a library's words may quote a setting
    return cmd.Result({"error": f"{type(exc).__name__}: {text}"}, code, [text])


def _render(args: argparse.Namespace, result: cmd.Result) -> None:
    if args.json:
        doc = {
            "command": args.command,
            "exit_code": result.code,
            "problems": result.problems,
            **result.data,
        }
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
