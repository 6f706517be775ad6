"""The PostgreSQL and ``CompositeSink`` options of ``eos``, and the log and sinks they select.

Where a sink command reads the epoch log (the first rule that applies):

1. ``--epoch-log PATH``: that ``FileEpochLog``;
2. ``--epoch-log-topic TOPIC`` given: that Kafka epoch log topic;
3. ``--member KIND:ID`` given (the sink is a ``CompositeSink``): the log of the first
   member's kind, as the composite's default (the Kafka epoch log, or the PostgreSQL epoch
   log table at ``--dsn``);
4. ``--dsn`` given: the sink's epoch log table in its control schema;
5. a Kafka bootstrap address known (``--bootstrap-servers``, ``$KAFKA_BOOTSTRAP_SERVERS``):
   the Kafka epoch log (the commands of ``_commands``, unchanged);
6. ``$POSTGRES_DSN`` set: the epoch log table there.

The sink's markers and open work: a PostgreSQL sink's when a DSN selected the log (or
``--dsn`` is given with ``--epoch-log``), each member's with ``--member``. ``verify
--table`` checks a table (``connectors.verify.check_table``); its log follows rules 1, 2
and then the table's database.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from connectors.kafka import DEFAULT_EPOCH_LOG_TOPIC
from connectors.kafka._clients import Cluster
from connectors.ops import _commands as cmd
from connectors.ops import _pgcommands as pgc
from connectors.ops._errors import UsageError
from connectors.ops._offsets import offsets
from connectors.ops._postgres import (
    DEFAULT_CONTROL_SCHEMA,
    DSN_ENV,
    PostgresRef,
    describe_dsn,
    secrets_of,
)
from connectors.verify import load_callable
from txn import EpochLogLockedError

SINK_COMMANDS = ("status", "abort-lingering", "reset", "offsets")
WRITE_MODES = ("append", "upsert", "changelog")


class _Given(argparse.Action):
    """Store the value and remember that the option was given (its default is a name too)."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.epoch_log_topic_given = True


def _database_options(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--dsn",
        help=f"a PostgreSQL sink's database: libpq connection string or postgresql:// URL "
        f"(default: ${DSN_ENV}, used when no Kafka bootstrap address is known); its "
        "password is never printed",
    )
    s.add_argument(
        "--control-schema",
        default=DEFAULT_CONTROL_SCHEMA,
        help="the PostgreSQL sink's control_schema option (default: %(default)s)",
    )


def add_sink_options(s: argparse.ArgumentParser) -> None:
    """Add ``--dsn``, ``--control-schema`` and ``--member`` to a sink command."""
    _database_options(s)
    s.add_argument(
        "--member",
        action="append",
        default=[],
        metavar="KIND:SINK_ID",
        help="SINK_ID is a CompositeSink; one per member, in order, KIND kafka or postgres "
        "(e.g. --member kafka:orders-k --member postgres:orders-p)",
    )


def add_verify_options(s: argparse.ArgumentParser) -> None:
    """Add the table check's options of ``verify`` (``--table`` for ``--output-topic``)."""
    _database_options(s)
    s.add_argument("--schema", default="public", help="the table's schema (default: public)")
    s.add_argument("--write-mode", choices=WRITE_MODES, default="append")
    s.add_argument("--id-column", default="id", help="column holding the record id")
    s.add_argument("--key-column", default="key", help="column holding the record key")
    s.add_argument("--op-fn", help="changelog: a record's op as a function, 'pkg.mod:func'")


def explicit_topic_action() -> type[argparse.Action]:
    """Return the action of ``--epoch-log-topic`` (rule 2 needs to know it was given)."""
    return _Given


def selects(args: argparse.Namespace) -> bool:
    """Whether this module serves the command (else ``_commands``, Kafka and file logs)."""
    if args.command == "verify":
        return args.table is not None
    if args.command not in SINK_COMMANDS:
        return False
    return bool(args.dsn or args.member) or (
        not args.bootstrap_servers and bool(os.environ.get(DSN_ENV))
    )


def needs_bootstrap(args: argparse.Namespace) -> bool:
    """Whether the command needs a Kafka bootstrap address (a Kafka log, member or topic)."""
    if not selects(args) or args.command == "verify":
        return True  # verify reads its input topic
    kinds = [m.partition(":")[0] for m in args.member]
    return (
        bool(args.topic if args.command == "status" else None)
        or (args.epoch_log is None and getattr(args, "epoch_log_topic_given", False))
        or pgc.KAFKA in kinds
    )


def _dsn(args: argparse.Namespace) -> str:
    dsn = args.dsn or os.environ.get(DSN_ENV)
    if not dsn:
        msg = f"a PostgreSQL sink needs --dsn (or ${DSN_ENV})"
        raise UsageError(msg)
    describe_dsn(dsn)  # refuses a string that does not parse, without showing it
    return dsn


def _members(args: argparse.Namespace) -> tuple[pgc.Side, ...]:
    sides = []
    for text in args.member:
        kind, _, sink_id = text.partition(":")
        if kind not in pgc.KINDS or not sink_id:
            msg = f"--member takes KIND:SINK_ID with KIND kafka or postgres, got {text!r}"
            raise UsageError(msg)
        sides.append(pgc.Side(kind, sink_id))
    return tuple(sides)


def _target(args: argparse.Namespace, cluster: Cluster | None) -> pgc.Target:
    """Return the log and the sides a command reads (the rules of the module docstring)."""
    log_id = args.sink_id if args.command != "verify" else args.composite_id or args.sink_id
    members = () if args.command == "verify" else _members(args)
    sides = members or (pgc.Side(pgc.POSTGRES, args.sink_id),)
    needs_pg = any(s.kind == pgc.POSTGRES for s in sides)
    pg = PostgresRef(_dsn(args), log_id, args.control_schema) if needs_pg else None
    topic = args.epoch_log_topic or DEFAULT_EPOCH_LOG_TOPIC
    kafka = (
        cmd.SinkRef(
            cluster=cluster,
            sink_id=log_id,
            epoch_log_topic=topic,
            marker_topic=args.marker_topic,
        )
        if cluster is not None
        else None
    )
    log: cmd.LogRef
    if args.epoch_log is not None:
        log = cmd.SinkRef(cluster=cluster or Cluster(""), sink_id=log_id, epoch_log=args.epoch_log)
        where = f"epoch log file {args.epoch_log}"
    elif getattr(args, "epoch_log_topic_given", False) or (
        members and members[0].kind == pgc.KAFKA
    ):
        if kafka is None:
            msg = "a Kafka epoch log needs --bootstrap-servers (or $KAFKA_BOOTSTRAP_SERVERS)"
            raise UsageError(msg)
        log, where = kafka, f"Kafka epoch log topic {topic!r} at {kafka.cluster.bootstrap_servers}"
    else:
        pg = pg or PostgresRef(_dsn(args), log_id, args.control_schema)
        log, where = pg, pg.where
    return pgc.Target(log, where, sides, bool(members), pg, kafka)


def run(args: argparse.Namespace, cluster: Cluster | None) -> cmd.Result:
    """Run a command this module serves (:func:`selects`).

    ``cluster``: the Kafka cluster (address and ``--command-config`` settings), None when
    no Kafka address is known (a PostgreSQL sink needs none).
    """
    try:
        return _run(args, cluster)
    except UsageError as exc:
        return failed(exc, cmd.USAGE)
    except EpochLogLockedError as exc:  # a coordinator holds the log: never act beside it
        return failed(exc, cmd.REFUSED, " (stop the sink's query first)")
    except Exception as exc:
        code = _exit_code(exc)
        if code is None:
            raise
        return failed(exc, code)


def _run(args: argparse.Namespace, cluster: Cluster | None) -> cmd.Result:
    if args.command == "verify" and (
        (args.composite_id is None) != (args.members is None) or args.sink_id is None
    ):
        msg = "verify --table needs the sink's --sink-id (and --composite-id with --members)"
        raise UsageError(msg)
    target = _target(args, cluster)
    if args.command == "status":
        return pgc.status(target, args.topic, args.scan)
    if args.command == "abort-lingering":
        return pgc.abort_lingering(target, args.dry_run)
    if args.command == "reset":
        return cmd.reset(target.log, args.query)
    if args.command == "offsets":
        cluster = target.kafka.cluster if target.kafka is not None else None
        pg_sides = [s for s in target.sides if s.kind == pgc.POSTGRES]
        recorded = None
        if target.pg is not None and len(pg_sides) == 1:
            recorded = target.pg.input_offsets(pg_sides[0].sink_id)
        return offsets(target.log, cluster, recorded)
    from connectors.ops._cli import _identity

    return pgc.verify_table(
        pgc.TableCheck(
            target,
            args.input_topic,
            args.table,
            args.schema,
            args.write_mode,
            _identity(args),
            load_callable(args.op_fn) if args.op_fn else None,
            args.id_column,
            args.key_column,
            args.sink_id,
            args.members,
        )
    )


def _exit_code(exc: Exception) -> int | None:
    """Return the exit code of a PostgreSQL error (None: not one; ``main`` maps it).

    2 for an option the sink config refuses (a control schema too long), 3 for a database
    that cannot be reached or read, or a missing ``postgres`` extra.
    """
    from connectors._extras import MissingExtraError

    if isinstance(exc, MissingExtraError):
        return cmd.UNAVAILABLE
    try:
        import psycopg

        from connectors.postgres import (
            PostgresFatalError,
            PostgresSinkConfigError,
            PostgresWriteError,
        )
    except ImportError:
        return None
    if isinstance(exc, PostgresSinkConfigError):
        return cmd.USAGE
    if isinstance(exc, (psycopg.Error, PostgresWriteError, PostgresFatalError)):
        return cmd.UNAVAILABLE
    return None


def failed(exc: Exception, code: int, hint: str = "") -> cmd.Result:
    """Return the result of a command that raised ``exc``: exit ``code``, the error named."""
    return cmd.Result({"error": f"{type(exc).__name__}: {exc}{hint}"}, code, [f"{exc}{hint}"])


def scrub(result: cmd.Result, args: argparse.Namespace) -> cmd.Result:
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
    return cmd.Result(data, result.code, problems)
