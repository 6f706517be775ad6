"""What a sink command works on: the epoch log it reads, and the sinks whose state it shows.

A :class:`Target` is a sink's epoch log (:class:`LogRef`: a Kafka epoch log topic, a
``FileEpochLog`` file, a PostgreSQL epoch log table) and its :class:`Side` s: the sink
itself, or a ``CompositeSink``'s members (``--member KIND:SINK_ID``), each under its own
id and served by its connector's admin interface (:class:`SinkAdmin`: ``_kafka``,
``_postgres``, ``_lakehouse``).

Where a command reads the epoch log (the first rule that applies):

1. ``--epoch-log PATH``: that ``FileEpochLog``;
2. ``--epoch-log-topic TOPIC`` given: that Kafka epoch log topic;
3. ``verify``: the log of its output's kind (``--output-topic``: Kafka; ``--table``: the
   table's database), and if that one does not know the sink id, the Kafka epoch log (a
   cluster known) or the PostgreSQL one (a DSN known); a sink command with ``--member``:
   the log of the first member's kind, as the composite's default;
4. ``--dsn`` given: the sink's epoch log table in its control schema; ``--delta`` /
   ``--iceberg`` given: the table sink's log file (``--epoch-log``, or for a local Delta
   table ``<table>/_eos/<sink_id>.epochlog``);
5. ``$POSTGRES_DSN`` set and no ``--bootstrap-servers`` (nor ``$KAFKA_BOOTSTRAP_SERVERS``):
   the epoch log table there;
6. otherwise the Kafka epoch log.

A sink command's single side is a table sink when ``--delta`` or ``--iceberg`` names its
table, a PostgreSQL sink when a DSN chose it (rules 4 and 5, or ``--dsn`` beside
``--epoch-log``), else a Kafka sink.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any, Protocol

from connectors.kafka._client import Cluster
from connectors.ops import _lakehouse
from connectors.ops._errors import UsageError
from connectors.ops._kafka import KafkaAdmin, KafkaLog
from connectors.ops._lakehouse import DELTA, ICEBERG, LakeAdmin, LakeLog
from connectors.ops._postgres import DSN_ENV, PostgresAdmin, PostgresLog, describe_dsn
from txn import EpochHistory, EpochLog

KAFKA, POSTGRES, FILE = "kafka", "postgres", "file"
KINDS = (KAFKA, POSTGRES, DELTA, ICEBERG)
LAKE = (DELTA, ICEBERG)
# The commands on one sink's state (its epoch log, markers and open work).
SINK_COMMANDS = ("status", "abort-lingering", "reset", "offsets")


class LogRef(Protocol):
    """A sink's epoch log of any kind (:class:`KafkaLog`, :class:`PostgresLog`)."""

    @property
    def sink_id(self) -> str: ...

    @property
    def where(self) -> str: ...

    def read_log(self) -> EpochHistory: ...

    def open_log(self) -> EpochLog: ...


class SinkAdmin(Protocol):
    """What ``eos`` asks of a connector about one of its sinks (``status``, ``abort-lingering``).

    ``decides_by_log``: the sink's open work is finished as its epoch log decided, so
    ``abort-lingering`` takes the log over first (no coordinator may decide meanwhile).
    """

    @property
    def kind(self) -> str: ...

    @property
    def decides_by_log(self) -> bool: ...

    def state(self, sink_id: str, history: EpochHistory) -> tuple[dict[str, Any], list[str]]:
        """Return what ``status`` shows of the sink (its markers, its open work), and problems."""
        ...

    def abort_lingering(
        self, sink_id: str, history: EpochHistory, width: int, dry_run: bool
    ) -> dict[str, Any]:
        """End the sink's open work (``width``: its write partitions); return what was done."""
        ...

    def recorded_offsets(self, sink_id: str) -> tuple[int, dict[tuple[str, int], int]] | None:
        """Return the input offsets the sink's output recorded itself (epoch, offsets), if any."""
        ...


@dataclass(frozen=True)
class Side:
    """A sink whose state a command shows: its connector's admin and its ``sink_id``."""

    admin: SinkAdmin
    sink_id: str


@dataclass(frozen=True)
class Target:
    """A sink's epoch log and its sides (one, or a composite's members)."""

    log: LogRef
    sides: tuple[Side, ...]
    composite: bool


def single_kind(args: argparse.Namespace) -> str:
    """Return the kind of a sink command's single side (the module docstring's end)."""
    if getattr(args, "delta", None):
        return DELTA
    if getattr(args, "iceberg", None):
        return ICEBERG
    return POSTGRES if dsn_chosen(args) else KAFKA


def dsn_chosen(args: argparse.Namespace) -> bool:
    """Whether a DSN names the sink's database (rules 4 and 5 of the module docstring)."""
    return bool(args.dsn) or (not args.bootstrap_servers and bool(os.environ.get(DSN_ENV)))


def _members(args: argparse.Namespace) -> list[tuple[str, str]]:
    members = []
    for text in getattr(args, "member", []):
        kind, _, sink_id = text.partition(":")
        if kind not in KINDS or not sink_id:
            msg = f"--member takes KIND:SINK_ID with KIND one of {', '.join(KINDS)}, got {text!r}"
            raise UsageError(msg)
        members.append((kind, sink_id))
    return members


def _log_kind(args: argparse.Namespace, default: str) -> str:
    """Rules 1-3 of the module docstring, then ``default`` (a table sink's log is a file)."""
    if args.epoch_log is not None:
        return default if default in LAKE else FILE
    if args.epoch_log_topic_given:
        return KAFKA
    return default


def needs_kafka(args: argparse.Namespace) -> bool:
    """Whether the command needs a Kafka cluster (a Kafka log, side, topic or input).

    Asked before the command runs: a malformed ``--member`` is the command's to refuse.
    """
    if args.command == "verify":
        topics = args.input_topic or args.output_topic or args.dead_letter_topic
        log = args.sink_id is not None and _log_kind(args, _verify_output_kind(args)) == KAFKA
        return bool(topics) or log
    if args.command not in SINK_COMMANDS:
        return True  # preflight
    kinds = [m.partition(":")[0] for m in args.member] or [single_kind(args)]
    topics = args.command == "status" and bool(args.topic)
    return KAFKA in kinds or _log_kind(args, kinds[0]) == KAFKA or topics


class _Admins:
    """The admin interfaces of a command, made once each when first needed."""

    def __init__(self, args: argparse.Namespace, cluster: Cluster | None) -> None:
        self.args, self.cluster = args, cluster
        self._made: dict[str, Any] = {}

    def kafka(self, why: str) -> KafkaAdmin:
        if self.cluster is None:
            msg = f"{why} needs --bootstrap-servers (or $KAFKA_BOOTSTRAP_SERVERS)"
            raise UsageError(msg)
        if KAFKA not in self._made:
            self._made[KAFKA] = KafkaAdmin(
                cluster=self.cluster,
                marker_topic=self.args.marker_topic,
                epoch_log_topic=self.args.epoch_log_topic,
                lanes=getattr(self.args, "lanes", KafkaAdmin.lanes),
            )
        admin: KafkaAdmin = self._made[KAFKA]
        return admin

    def postgres(self) -> PostgresAdmin:
        if POSTGRES not in self._made:
            dsn = self.args.dsn or os.environ.get(DSN_ENV)
            if not dsn:
                msg = f"a PostgreSQL sink needs --dsn (or ${DSN_ENV})"
                raise UsageError(msg)
            describe_dsn(dsn)  # refuses a string that does not parse, without showing it
            self._made[POSTGRES] = PostgresAdmin(dsn, self.args.control_schema)
        admin: PostgresAdmin = self._made[POSTGRES]
        return admin

    def lake(self, kind: str) -> LakeAdmin:
        location = self.args.delta if kind == DELTA else self.args.iceberg
        table = _lakehouse.lake_table(kind, location, self.args.catalog, self.args.catalog_property)
        return LakeAdmin(table, kind)

    def of(self, kind: str, sink_id: str) -> SinkAdmin:
        if kind == KAFKA:
            return self.kafka(f"Kafka sink {sink_id!r}")
        if kind in LAKE:
            return self.lake(kind)
        return self.postgres()

    def log(self, kind: str, sink_id: str) -> LogRef:
        """Return the log of ``kind`` under ``sink_id`` (a file log settles by Kafka markers)."""
        if kind in LAKE:
            path = self.args.epoch_log
            if path is None:
                path = _lakehouse.default_log(kind, self.lake(kind).table, sink_id)
            return LakeLog(sink_id, path)
        if kind == POSTGRES:
            return PostgresLog(self.postgres(), sink_id)
        if kind == FILE and self.cluster is None:
            return KafkaLog(
                KafkaAdmin(cluster=Cluster(bootstrap_servers="")), sink_id, self.args.epoch_log
            )
        admin = self.kafka("a Kafka epoch log")
        return KafkaLog(admin, sink_id, self.args.epoch_log if kind == FILE else None)


def sink_target(args: argparse.Namespace, cluster: Cluster | None) -> Target:
    """Return the log and the sides of a sink command (the rules of the module docstring)."""
    admins = _Admins(args, cluster)
    members = _members(args)
    single = single_kind(args)
    kind = _log_kind(args, members[0][0] if members else single)
    sides = tuple(Side(admins.of(k, s), s) for k, s in members or [(single, args.sink_id)])
    return Target(admins.log(kind, args.sink_id), sides, bool(members))


def verify_logs(args: argparse.Namespace, cluster: Cluster | None) -> list[LogRef]:
    """Return where ``verify --sink-id``'s log may be, first choice first (none: no sink id).

    The log is the composite's with ``--composite-id``. First the log rules 1-3 choose;
    unless ``--epoch-log`` or ``--epoch-log-topic`` named it, then the other logs the
    options reach: the Kafka epoch log when a cluster is known, the PostgreSQL epoch log
    table when a DSN is (a composite's log is its first member's kind, which the output's
    kind need not be).
    """
    if args.sink_id is None:
        return []
    output = _verify_output_kind(args)
    admins = _Admins(args, cluster)
    owner = args.composite_id or args.sink_id
    first = _log_kind(args, output)
    logs = [admins.log(first, owner)]
    if args.epoch_log is not None or args.epoch_log_topic_given:
        return logs
    if first != KAFKA and cluster is not None:
        logs.append(admins.log(KAFKA, owner))
    if first != POSTGRES and (args.dsn or os.environ.get(DSN_ENV)):
        logs.append(admins.log(POSTGRES, owner))
    return logs


def _verify_output_kind(args: argparse.Namespace) -> str:
    if args.delta or args.iceberg:
        return DELTA if args.delta else ICEBERG
    return POSTGRES if args.table is not None else KAFKA


def lake_admin(args: argparse.Namespace) -> LakeAdmin:
    """Return the admin of ``verify``'s ``--delta`` / ``--iceberg`` table."""
    return _Admins(args, None).lake(DELTA if args.delta else ICEBERG)


def postgres_admin(args: argparse.Namespace) -> PostgresAdmin:
    """Return the admin of ``--dsn`` (or ``$POSTGRES_DSN``) and ``--control-schema``."""
    return _Admins(args, None).postgres()
