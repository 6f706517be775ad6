"""``eos``: parse once, dispatch once (``_commands.COMMANDS``), map errors to exit codes, render."""

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

from connectors.kafka import KafkaCode, KafkaConnectorError
from connectors.kafka._client import Cluster, connect_admin
from connectors.lakehouse import LakehouseError
from connectors.ops import _parser, _postgres
from connectors.ops._commands import COMMANDS
from connectors.ops._errors import UnknownSinkError, UnreadableLogError, UsageError
from connectors.ops._postgres import DSN_ENV, secrets_of
from connectors.ops._properties import ENV_PREFIX, PropertiesError, command_cluster
from connectors.ops._result import (
    REFUSED,
    UNAVAILABLE,
    USAGE,
    Result,
    failed,
)
from connectors.ops._target import needs_kafka
from connectors.stage import StageCode
from connectors.verify import IdentityOptionError, RecordFormatError, VerifyError
from txn import ErrorCode, TxnCode, TxnError, has_code

# The exit code of an error a command raised, by its class or its code, and the cause the
# footer names: the first match applies.
_ERROR_CODES: tuple[tuple[tuple[type[BaseException] | ErrorCode, ...], int, str], ...] = (
    ((TxnCode.EPOCH_LOG_LOCKED,), REFUSED, "a running coordinator holds the sink's epoch log"),
    ((UsageError,), USAGE, "bad arguments (the problem above)"),
    ((IdentityOptionError,), USAGE, "bad arguments: an identity or expected-set option"),
    ((RecordFormatError,), USAGE, "records that do not fit the verify identity options"),
    (
        (KafkaCode.AUTHENTICATION,),
        USAGE,
        "the cluster refused the client settings (authentication)",
    ),
    (
        (UnknownSinkError,),
        UNAVAILABLE,
        "the epoch log holds no record of the sink id (unknown sink)",
    ),
    ((UnreadableLogError,), REFUSED, "a PostgreSQL connection string given as --epoch-log"),
    (
        (StageCode.NOT_KAFKA_INPUT,),
        REFUSED,
        "the sink's input is not Kafka: no input offsets to show",
    ),
    (
        (TxnCode.EPOCH_LOG, TxnCode.EPOCH_LOG_CORRUPT),
        UNAVAILABLE,
        "the epoch log could not be read",
    ),
    ((VerifyError,), UNAVAILABLE, "a topic could not be read to its end"),
    (
        (
            KafkaCode.PREFLIGHT,
            KafkaCode.BROKER_UNAVAILABLE,
            KafkaCode.CONNECT,
            KafkaCode.TOPIC_MISSING,
            KafkaException,
        ),
        UNAVAILABLE,
        "the Kafka cluster could not be read",
    ),
    ((LakehouseError,), UNAVAILABLE, "the table or its storage could not be read"),
    ((TxnError,), REFUSED, "the command was refused (the problem above)"),
)
# A coordinator holds the log (a running sink): the command never acts beside it.
_HELD_LOG_HINT = " (stop the sink's query first)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``eos`` with ``argv`` (default: the command line); return the exit code."""
    try:
        args = _parser.build().parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad arguments, 0 on --help
        return int(exc.code or 0)
    try:
        cluster = _cluster(args)
    except (PropertiesError, KafkaConnectorError) as exc:
        if isinstance(exc, KafkaConnectorError) and exc.code is not KafkaCode.CLIENT_CONFIG:
            raise
        print(f"eos: {exc}", file=sys.stderr)
        return USAGE
    try:
        if cluster is not None and needs_kafka(args):
            connect_admin(cluster)  # first contact: a wrong address or credentials fail fast
        result = COMMANDS[args.command](args, cluster)
    except Exception as exc:
        known = error_code(exc)
        if known is None:
            raise
        hint = _HELD_LOG_HINT if has_code(exc, TxnCode.EPOCH_LOG_LOCKED) else ""
        result = failed(exc, *known, hint)
    result = _scrub(result, args)
    _render(args, result)
    return result.code


def error_code(exc: Exception) -> tuple[int, str] | None:
    """Return the exit code of ``exc`` (:data:`EXIT_CODES`) and its cause for the footer.

    None: not an error ``eos`` maps (a bug: it propagates with its trace).
    """
    found = _postgres.error_code(exc)
    if found is not None:
        return found
    return next(((code, why) for kinds, code, why in _ERROR_CODES if _matches(exc, kinds)), None)


def _matches(exc: Exception, kinds: tuple[type[BaseException] | ErrorCode, ...]) -> bool:
    return any(
        has_code(exc, kind) if isinstance(kind, ErrorCode) else isinstance(exc, kind)
        for kind in kinds
    )


def _cluster(args: argparse.Namespace) -> Cluster | None:
    """Return the Kafka cluster of the command; None for a PostgreSQL-only command with none.

    Raises:
        PropertiesError: no Kafka address where the command needs one, or a bad file.
        KafkaCode.CLIENT_CONFIG: a setting librdkafka or the kit refuses.

    """
    known = bool(
        args.bootstrap_servers
        or args.command_config
        or any(name.startswith(ENV_PREFIX) for name in os.environ)
    )
    if not known and not needs_kafka(args):
        return None
    return command_cluster(args.bootstrap_servers, args.command_config, os.environ)


def _scrub(result: Result, args: argparse.Namespace) -> Result:
    """Return ``result`` with every secret of the DSNs in use replaced by ``***``."""
    secrets = secrets_of(getattr(args, "dsn", None)) + secrets_of(os.environ.get(DSN_ENV))
    secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
    if not secrets:
        return result
    text = json.dumps([result.data, result.problems], default=str)
    secrets = [json.dumps(s)[1:-1] for s in secrets]
    if not any(s in text for s in secrets):
        return result
    for secret in secrets:
        text = text.replace(secret, "***")
    data, problems = json.loads(text)
    return Result(data=data, code=result.code, problems=problems, cause=result.cause)


def _render(args: argparse.Namespace, result: Result) -> None:
    if args.json:
        doc = {
            "command": args.command,
            "exit_code": result.code,
            "cause": result.reason(),
            "problems": result.problems,
            **result.data,
        }
        print(json.dumps(doc, indent=2, sort_keys=True, default=str))
        return
    console = Console()
    table = Table(title=f"eos {args.command}", show_header=True)
    table.add_column("item")
    table.add_column("value")
    verbose = getattr(args, "verbose", False)
    for key, value in result.data.items():
        table.add_row(key, _cell(value, verbose))
    console.print(table)
    for problem in result.problems:
        console.print(f"[red]problem:[/] {problem}")
    console.print(result.footer(), markup=False, soft_wrap=True)


def _cell(value: Any, verbose: bool) -> str:
    """Return a value as a table cell: a list of records one line each unless ``verbose``."""
    if not verbose and isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return "\n".join(" ".join(f"{k}={v}" for k, v in item.items()) for item in value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, indent=1, default=str)
    return str(value)
