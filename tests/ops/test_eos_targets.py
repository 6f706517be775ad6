"""Which epoch log and which sides an ``eos`` command works on (``connectors.ops._target``).

The rules of docs/operations.md, "The `eos` command", checked on the parsed arguments alone:
building a target reads nothing (no broker, no database here).
"""

from __future__ import annotations

import argparse

import pytest

from connectors.kafka._client import Cluster
from connectors.ops import _parser
from connectors.ops._errors import UsageError
from connectors.ops._kafka import KafkaAdmin, KafkaLog
from connectors.ops._postgres import DSN_ENV, PostgresAdmin, PostgresLog
from connectors.ops._target import needs_kafka, sink_target, verify_logs

CLUSTER = Cluster(bootstrap_servers="h:9092")
DSN = "host=db dbname=app user=etl password=secret-pw"


def parse(*argv: str) -> argparse.Namespace:
    return _parser.build().parse_args(["--bootstrap-servers", "h:9092", *argv])


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)


def test_a_kafka_sink_reads_the_kafka_log_and_shows_its_own_markers() -> None:
    target = sink_target(parse("status", "s1", "--marker-topic", "mk"), CLUSTER)
    assert isinstance(target.log, KafkaLog) and target.log.path is None
    assert target.log.admin.marker_topic == "mk"
    [side] = target.sides
    assert isinstance(side.admin, KafkaAdmin) and side.sink_id == "s1" and not target.composite


def test_a_file_log_is_read_before_anything_else() -> None:
    target = sink_target(parse("status", "s1", "--epoch-log", "/x/log", "--dsn", DSN), CLUSTER)
    assert isinstance(target.log, KafkaLog) and target.log.path == "/x/log"
    assert isinstance(target.sides[0].admin, PostgresAdmin)  # --dsn: a PostgreSQL sink


def test_a_dsn_picks_the_table_unless_the_log_topic_is_given() -> None:
    pg = sink_target(parse("reset", "s1", "--dsn", DSN, "--control-schema", "c"), CLUSTER)
    assert isinstance(pg.log, PostgresLog) and pg.log.admin.control_schema == "c"
    topic = sink_target(parse("reset", "s1", "--dsn", DSN, "--epoch-log-topic", "t"), CLUSTER)
    assert isinstance(topic.log, KafkaLog) and topic.log.admin.epoch_log_topic == "t"
    assert isinstance(topic.sides[0].admin, PostgresAdmin)


def test_a_composite_reads_the_log_of_its_first_member_s_kind() -> None:
    members = ("--member", "kafka:c-k", "--member", "postgres:c-p", "--dsn", DSN)
    target = sink_target(parse("status", "c", *members), CLUSTER)
    assert isinstance(target.log, KafkaLog) and target.log.sink_id == "c"
    assert [(s.admin.kind, s.sink_id) for s in target.sides] == [
        ("kafka", "c-k"),
        ("postgres", "c-p"),
    ]
    first_pg = sink_target(parse("status", "c", *members[2:4], *members[:2], "--dsn", DSN), CLUSTER)
    assert isinstance(first_pg.log, PostgresLog) and first_pg.composite


def test_postgres_dsn_in_the_environment_counts_only_without_a_kafka_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(DSN_ENV, DSN)
    args = _parser.build().parse_args(["status", "s1"])
    assert not needs_kafka(args)
    assert isinstance(sink_target(args, None).log, PostgresLog)
    assert isinstance(sink_target(parse("status", "s1"), CLUSTER).log, KafkaLog)


@pytest.mark.parametrize(
    ("argv", "needed"),
    [
        (["status", "s1"], True),
        (["status", "s1", "--dsn", DSN], False),
        (["status", "s1", "--dsn", DSN, "--topic", "out"], True),
        (["status", "s1", "--dsn", DSN, "--epoch-log-topic", "t"], True),
        (["abort-lingering", "c", "--dsn", DSN, "--member", "kafka:k"], True),
        (["offsets", "s1", "--dsn", DSN, "--epoch-log", "/x"], False),
        (["preflight"], True),
        (["verify", "--input-topic", "i", "--table", "t", "--dsn", DSN], True),
        (
            ["verify", "--expected-range", "0:9", "--table", "t", "--sink-id", "s", "--dsn", DSN],
            False,
        ),
        (["verify", "--expected-file", "f", "--output-topic", "o"], True),
        (["verify", "--expected-range", "0:9", "--delta", "/t", "--sink-id", "s"], False),
        (
            ["verify", "--expected-range", "0:9", "--table", "t", "--sink-id", "s"]
            + ["--epoch-log-topic", "log"],
            True,
        ),
    ],
)
def test_a_command_needs_kafka_only_for_a_kafka_log_side_topic_or_input(
    argv: list[str], needed: bool
) -> None:
    assert needs_kafka(_parser.build().parse_args(argv)) is needed


def test_a_malformed_member_is_refused_by_the_command_not_before_it() -> None:
    args = parse("status", "c", "--member", "mysql:x", "--dsn", DSN)
    assert not needs_kafka(args)  # no Kafka named: no cluster asked for
    with pytest.raises(UsageError, match="KIND:SINK_ID"):
        sink_target(args, None)


def test_bad_members_and_missing_databases_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="KIND:SINK_ID"):
        sink_target(parse("status", "c", "--member", "mysql:x"), CLUSTER)
    with pytest.raises(UsageError, match="--dsn"):
        sink_target(parse("status", "c", "--member", "postgres:x"), CLUSTER)
    with pytest.raises(UsageError, match="bootstrap-servers"):
        sink_target(parse("status", "c", "--member", "kafka:x", "--dsn", DSN), None)
    with pytest.raises(UsageError, match="not a valid libpq") as refused:
        sink_target(parse("status", "s1", "--dsn", "host='unclosed password=secret-pw"), CLUSTER)
    assert "secret-pw" not in str(refused.value)


def test_verify_reads_the_log_of_its_output_s_kind_then_the_others_it_can_reach() -> None:
    base = ("verify", "--input-topic", "i", "--sink-id", "m", "--composite-id", "c")
    topic = verify_logs(parse(*base, "--members", "2", "--output-topic", "o"), CLUSTER)
    assert [type(log) for log in topic] == [KafkaLog] and topic[0].sink_id == "c"
    table = verify_logs(parse(*base, "--members", "2", "--table", "t", "--dsn", DSN), CLUSTER)
    # a composite's table member: its log may be the composite's Kafka log (first member)
    assert [type(log) for log in table] == [PostgresLog, KafkaLog]
    assert {log.sink_id for log in table} == {"c"}
    both = verify_logs(parse(*base, "--members", "2", "--output-topic", "o", "--dsn", DSN), CLUSTER)
    assert [type(log) for log in both] == [KafkaLog, PostgresLog]
    named = parse(*base, "--members", "2", "--table", "t", "--dsn", DSN, "--epoch-log-topic", "l")
    assert [type(log) for log in verify_logs(named, CLUSTER)] == [KafkaLog]  # named: only it
    no_cluster = parse(*base, "--members", "2", "--table", "t", "--dsn", DSN)
    assert [type(log) for log in verify_logs(no_cluster, None)] == [PostgresLog]
    assert verify_logs(parse("verify", "--input-topic", "i", "--output-topic", "o"), CLUSTER) == []


def test_a_table_sink_reads_its_log_file_and_shows_its_table() -> None:
    from connectors.ops._lakehouse import LakeAdmin, LakeLog

    delta = sink_target(parse("status", "s1", "--delta", "/data/t"), None)
    assert isinstance(delta.log, LakeLog) and delta.log.path == "/data/t/_eos/s1.epochlog"
    [side] = delta.sides
    assert isinstance(side.admin, LakeAdmin) and side.admin.kind == "delta"
    assert not needs_kafka(parse("status", "s1", "--delta", "/data/t"))
    given = sink_target(parse("status", "s1", "--delta", "/data/t", "--epoch-log", "/l"), None)
    assert isinstance(given.log, LakeLog) and given.log.path == "/l"  # its own file log
    iceberg = ("status", "s1", "--iceberg", "db.t", "--catalog-property", "uri=sqlite:///c.db")
    with pytest.raises(UsageError, match="--epoch-log"):  # only a local Delta table has one
        sink_target(parse(*iceberg), None)
    target = sink_target(parse(*iceberg, "--epoch-log", "/l"), None)
    assert target.sides[0].admin.kind == "iceberg"
    with pytest.raises(UsageError, match="KEY=VALUE"):
        sink_target(parse("status", "s1", "--iceberg", "db.t", "--catalog-property", "x"), None)
    mixed = ("status", "c", "--member", "kafka:c-k", "--member", "delta:c-d", "--delta", "/t")
    composite = sink_target(parse(*mixed), CLUSTER)
    assert isinstance(composite.log, KafkaLog)  # the first member's kind
    assert [(s.admin.kind, s.sink_id) for s in composite.sides] == [
        ("kafka", "c-k"),
        ("delta", "c-d"),
    ]
    [lake_log] = verify_logs(
        parse("verify", "--input-topic", "i", "--delta", "/t", "--sink-id", "s1"), None
    )
    assert isinstance(lake_log, LakeLog) and lake_log.path == "/t/_eos/s1.epochlog"
