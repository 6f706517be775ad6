"""``eos verify``: the checker of the output's kind, on the expected records and the sink's log.

The expected records are the input topic's, or an expected set of ids (``--expected-range``,
``--expected-file``, ``--expected-query``) for a query whose input is no topic. The log is
found from the sink id alone (``--sink-id``, a composite's ``--composite-id``): the log of
the output's kind first (``_target.verify_logs``), then the other kinds the options can
reach, so a composite's table member needs no ``--epoch-log-topic`` when the composite's
log is in Kafka.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from connectors.kafka._client import Cluster
from connectors.ops import _kafka, _parser
from connectors.ops._errors import UnknownSinkError, UsageError
from connectors.ops._lakehouse import LakeCheck, verify_lake
from connectors.ops._postgres import DSN_ENV, TableCheck, verify_table
from connectors.ops._result import Result
from connectors.ops._target import LogRef, lake_admin, postgres_admin, verify_logs
from connectors.verify import (
    HistoryLike,
    Record,
    expected_records,
    id_range,
    ids_in_file,
    ids_of_query,
    load_callable,
    member_history,
    read_topic,
)


def verify(args: argparse.Namespace, cluster: Cluster | None) -> Result:
    """``eos verify``: the checker of the output's kind (a topic, a PostgreSQL or a lake table)."""
    _check_options(args)
    inputs = _expected(args, cluster)
    history = _checked_history(args, verify_logs(args, cluster))
    identity = _parser.identity(args)
    if args.output_topic is not None:
        return _kafka.verify_topic(
            _kafka.TopicCheck(
                cluster=_kafka_of(cluster, "--output-topic"),
                inputs=inputs,
                output_topic=args.output_topic,
                identity=identity,
                history=history,
                sink_id=args.sink_id,
                marker_topic=args.marker_topic,
                dead_letter_topic=args.dead_letter_topic,
            )
        )
    assert history is not None  # noqa: S101 - _check_options: a table check has --sink-id
    if args.table is None:
        return verify_lake(
            LakeCheck(
                table=lake_admin(args).table,
                history=history,
                inputs=inputs,
                identity=identity,
                id_column=args.id_column,
                sink_id=args.sink_id,
            )
        )
    return verify_table(
        TableCheck(
            admin=postgres_admin(args),
            history=history,
            inputs=inputs,
            table=args.table,
            schema=args.schema,
            write_mode=args.write_mode,
            identity=identity,
            op=load_callable(args.op_fn) if args.op_fn else None,
            id_column=args.id_column,
            key_column=args.key_column,
            sink_id=args.sink_id,
        )
    )


def _check_options(args: argparse.Namespace) -> None:
    """Refuse options that do not fit together (exit 2), before any I/O."""
    if (args.composite_id is None) != (args.members is None) or (
        args.composite_id is not None and args.sink_id is None
    ):
        msg = "--composite-id and --members go together, with the member's --sink-id"
        raise UsageError(msg)
    if args.output_topic is None and args.sink_id is None:
        msg = "verify --table / --delta / --iceberg needs the sink's --sink-id"
        raise UsageError(msg)
    if args.dead_letter_topic is not None and args.output_topic is None:
        msg = "--dead-letter-topic goes with --output-topic (a Kafka sink's dead letters)"
        raise UsageError(msg)
    if args.input_topic is None and args.write_mode != "append":
        msg = (
            f"--write-mode {args.write_mode} checks each key's last change: it needs the "
            "input topic's order (--input-topic), an expected set has none"
        )
        raise UsageError(msg)


def _kafka_of(cluster: Cluster | None, why: str) -> Cluster:
    if cluster is None:
        msg = f"{why} needs --bootstrap-servers (or $KAFKA_BOOTSTRAP_SERVERS)"
        raise UsageError(msg)
    return cluster


def _expected(args: argparse.Namespace, cluster: Cluster | None) -> Sequence[Record]:
    """Return the expected records: the input topic's, or those of an expected set of ids."""
    if args.input_topic is not None:
        kafka = _kafka_of(cluster, "--input-topic")
        return read_topic(kafka.bootstrap_servers, args.input_topic, client_config=kafka.config)
    if args.expected_range is not None:
        return expected_records(id_range(args.expected_range))
    if args.expected_file is not None:
        return expected_records(ids_in_file(args.expected_file))
    dsn = args.dsn or os.environ.get(DSN_ENV)
    if not dsn:
        msg = f"--expected-query runs in --dsn's database (or ${DSN_ENV}'s)"
        raise UsageError(msg)
    return expected_records(ids_of_query(dsn, args.expected_query))


def _checked_history(args: argparse.Namespace, logs: Sequence[LogRef]) -> HistoryLike | None:
    """Return the history ``verify`` compares (a composite's, cut to the member).

    ``logs``: where the sink id's log may be, first choice first; the first that knows
    the sink id is read. None: no ``--sink-id``, the topics only.
    """
    if not logs:
        return None
    unknown: list[str] = []
    for log in logs:
        try:
            history: HistoryLike = log.read_log()
        except UnknownSinkError as exc:
            unknown.append(str(exc))
            continue
        return history if args.members is None else member_history(history, args.members)
    raise UnknownSinkError("; and ".join(unknown))
