"""The one argument parser of ``eos``: every command and option, for every connector."""

from __future__ import annotations

import argparse
import os
from typing import Any

from connectors.kafka import DEFAULT_EPOCH_LOG_TOPIC, DEFAULT_MARKER_TOPIC
from connectors.kafka._sink._config import DEFAULT_PRODUCER_LANES
from connectors.ops._postgres import DEFAULT_CONTROL_SCHEMA, DSN_ENV
from connectors.ops._properties import ENV_PREFIX
from connectors.ops._result import EXIT_CODES
from connectors.verify import (
    IdentityFn,
    kafka_key,
    load_callable,
    record_identity,
    with_expected,
)

WRITE_MODES = ("append", "upsert", "changelog")
# Transaction timeout preflight checks when none is given: KafkaSink's default, in ms.
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


def _epilog() -> str:
    return "exit codes: " + "; ".join(f"{c} {what}" for c, what in EXIT_CODES.items())


class _Given(argparse.Action):
    """Store the value and remember that the option was given (its default is a name too)."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.epoch_log_topic_given = True


def build() -> argparse.ArgumentParser:
    """Return the parser of ``eos`` (docs/operations.md, "The `eos` command")."""
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
    p.set_defaults(epoch_log_topic_given=False)
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, epilog=_epilog())

    def sink_command(name: str, text: str) -> argparse.ArgumentParser:
        s = command(name, text)
        s.add_argument("sink_id")
        _log_options(s)
        _database_options(s)
        _lake_options(s, s)
        s.add_argument(
            "--member",
            action="append",
            default=[],
            metavar="KIND:SINK_ID",
            help="SINK_ID is a CompositeSink; one per member, in order, KIND kafka, postgres, "
            "delta or iceberg (e.g. --member kafka:orders-k --member postgres:orders-p)",
        )
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
    s.add_argument(
        "--verbose",
        action="store_true",
        help="every epoch's plan (parallelism, attempt, mode, guarantee) and the full views; "
        "by default one line per epoch",
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
    s.add_argument(
        "--strict",
        action="store_true",
        help="durability warnings (replication, min.insync.replicas, unclean leader "
        "election, the transaction state log) are problems: exit 1",
    )
    s = command("verify", "check exactly-once output against its input (docs/testing.md)")
    _verify_options(s)
    return p


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
        action=_Given,
        help="the sink's epoch_log_topic option (default: %(default)s)",
    )
    s.add_argument(
        "--marker-topic",
        default=DEFAULT_MARKER_TOPIC,
        help="the sink's marker_topic option (default: %(default)s)",
    )


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


def _lake_options(s: argparse.ArgumentParser, tables: Any) -> None:
    """Add where a table sink's table is (``tables``: the parser or a group to put them in)."""
    tables.add_argument("--delta", metavar="URI", help="a DeltaSink's table (path or URI)")
    tables.add_argument(
        "--iceberg",
        metavar="TABLE",
        help="an IcebergSink's table, namespace.table, in --catalog",
    )
    s.add_argument(
        "--catalog",
        default="default",
        help="the Iceberg catalog's name in pyiceberg's configuration (.pyiceberg.yaml, "
        "PYICEBERG_CATALOG__* variables; default: %(default)s)",
    )
    s.add_argument(
        "--catalog-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a property of that catalog on top of pyiceberg's configuration (the sink's "
        "catalog_properties, e.g. uri=sqlite:///cat.db); keep credentials in pyiceberg's "
        "configuration, not on the command line",
    )


def _verify_options(s: argparse.ArgumentParser) -> None:
    expected = s.add_mutually_exclusive_group(required=True)
    expected.add_argument("--input-topic", help="the topic the query read: the expected records")
    expected.add_argument(
        "--expected-range",
        metavar="START:END",
        help="the expected ids are START..END-1 (a rate source's values: 0:N for N rows)",
    )
    expected.add_argument(
        "--expected-file", metavar="FILE", help="the expected ids, one per line of FILE"
    )
    expected.add_argument(
        "--expected-query",
        metavar="SQL",
        help="the expected ids: the first column of this query's rows in --dsn's database",
    )
    s.add_argument(
        "--dead-letter-topic",
        help="the sink's dead-letter topic (--output-topic): every input record is in the "
        "output or there, once, never in both",
    )
    output = s.add_mutually_exclusive_group(required=True)
    output.add_argument("--output-topic")
    output.add_argument("--table", help="the table a PostgresSink wrote (with --dsn)")
    _lake_options(s, output)
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
    ident.add_argument(
        "--id-by-kafka-key",
        action="store_true",
        help="the id is the record's Kafka key (no JSON value needed; no order to check)",
    )
    order = s.add_mutually_exclusive_group()
    order.add_argument(
        "--order-key-field",
        help="dotted path of the key whose records must keep their order (default: key, "
        "when there is an order to check: an --input-topic, a topic output or a keyed "
        "table, and the id not the Kafka key)",
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
    _database_options(s)
    s.add_argument("--schema", default="public", help="the table's schema (default: public)")
    s.add_argument("--write-mode", choices=WRITE_MODES, default="append")
    s.add_argument("--id-column", default="id", help="column holding the record id")
    s.add_argument(
        "--key-column",
        default="key",
        help="upsert and changelog: the column holding the record key (default: %(default)s; "
        "an append check reads ids only)",
    )
    s.add_argument("--op-fn", help="changelog: a record's op as a function, 'pkg.mod:func'")


def identity(args: argparse.Namespace) -> IdentityFn:
    """Return the record identity of ``verify``'s options (id and ordering key).

    The ordering key defaults to the JSON field ``key`` only where there is an order to
    check (:func:`order_checked`); records of an expected set are identified by their id
    (``with_expected``).
    """
    id_of: Any = args.id_field
    if args.id_fn:
        id_of = load_callable(args.id_fn)
    elif args.id_by_kafka_key:
        id_of = kafka_key
    order: Any = args.order_key_field
    if args.order_key_fn:
        order = load_callable(args.order_key_fn)
    elif args.order_by_kafka_key:
        order = kafka_key
    elif args.no_order_check:
        order = None
    elif order is None and order_checked(args):
        order = "key"
    return with_expected(record_identity(id_of, order))


def order_checked(args: argparse.Namespace) -> bool:
    """Whether a default ordering key applies: a topic input, an output that keeps an order.

    Not for an expected set (no input order), an id that is the Kafka key (one record per
    key), nor a table in append mode (its rows have no order; the check compares ids).
    """
    appended_table = args.output_topic is None and args.write_mode == "append"
    return args.input_topic is not None and not args.id_by_kafka_key and not appended_table
