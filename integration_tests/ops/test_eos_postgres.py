"""``eos`` on PostgreSQL sinks and on ``CompositeSink``, against a real PostgreSQL server.

Epochs are written by real sinks through Spark; crashes are left by fault plans (a driver
raising after the commit decision, or before any decision, leaves prepared transactions).
``eos`` then reads the epoch log table, shows the markers and prepared transactions,
finishes them as the log decided, resets the binding, and checks the table.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from connectors.kafka import KafkaSink
from connectors.ops import main
from connectors.postgres import PostgresSink
from connectors.stage import CompositeSink
from connectors.testing import FaultPlan, inject_faults
from connectors.verify import produce_input, read_committed_topic
from integration_tests.postgres._queries import wait_until

pytestmark = pytest.mark.spark

ROWS = 10  # rows per epoch


def eos(*args: str, capsys: Any, bootstrap: str | None = None) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main([*(["--bootstrap-servers", bootstrap] if bootstrap else []), "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def with_password(dsn: str) -> tuple[str, str]:
    """The DSN with a password (the server's own if it has one), and that password."""
    given = conninfo_to_dict(dsn).get("password")
    if given:
        return dsn, str(given)
    secret = f"pw-{uuid.uuid4().hex[:12]}"  # a trusting server ignores it
    return make_conninfo(dsn, password=secret), secret


def batch(spark: Any, epoch: int) -> Any:
    return spark.range(epoch * ROWS, (epoch + 1) * ROWS, numPartitions=2).selectExpr(
        "id", "concat('v', id) AS v"
    )


def faults(tmp_path: Path, *entries: tuple[str, str, int]) -> FaultPlan:
    path = tmp_path / f"faults-{uuid.uuid4().hex[:6]}.json"
    path.write_text(
        json.dumps(
            [
                {"id": fid, "step": step, "epoch": epoch, "action": "raise"}
                for fid, step, epoch in entries
            ]
        )
    )
    return FaultPlan(str(path))


class Table:
    """A table ``t`` of the test's schema, a PostgresSink on it, and what it holds."""

    def __init__(self, dsn: str, pg: Any, schema: str, name: str = "t") -> None:
        self.dsn, self.pg, self.schema, self.name = dsn, pg, schema, name
        self.sink_id = f"{schema}-{name}"
        pg.execute(
            sql.SQL("CREATE TABLE {}.{} (id bigint, v text)").format(
                sql.Identifier(schema), sql.Identifier(name)
            )
        )

    def sink(self, **options: Any) -> PostgresSink:
        return PostgresSink(
            self.dsn,
            self.name,
            self.sink_id,
            schema=self.schema,
            control_schema=self.schema,
            commit_protocol="two-phase",
            **options,
        )

    def epochs(self) -> Counter[int]:
        rows = self.pg.execute(
            sql.SQL("SELECT id FROM {}.{}").format(
                sql.Identifier(self.schema), sql.Identifier(self.name)
            )
        ).fetchall()
        return Counter(int(r[0]) // ROWS for r in rows)

    def prepared(self) -> list[str]:
        rows = self.pg.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s ORDER BY gid",
            (f"eos:{self.sink_id}:%",),
        ).fetchall()
        return [r[0] for r in rows]

    def cli(self, *extra: str) -> tuple[str, ...]:
        return (self.sink_id, "--dsn", self.dsn, "--control-schema", self.schema, *extra)


@pytest.fixture
def no_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL commands run without a Kafka address (and without $POSTGRES_DSN)."""
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("POSTGRES_DSN", raising=False)


def test_status_and_reset_of_a_postgres_sink(
    spark, postgres_dsn, pg, schema, capsys, monkeypatch, no_kafka
) -> None:
    table = Table(postgres_dsn, pg, schema)
    with table.sink(parallelism=2) as sink:
        for epoch in range(2):
            assert sink(batch(spark, epoch), epoch).committed
    dsn, secret = with_password(postgres_dsn)
    code, status = eos(
        "status", table.sink_id, "--dsn", dsn, "--control-schema", schema, capsys=capsys
    )
    assert code == 0, status
    assert status["epochs"] == [
        {"epoch": 0, "state": "committed"},
        {"epoch": 1, "state": "committed"},
    ]
    assert status["last_committed_epoch"] == 1 and status["in_doubt"] == []
    assert {p: m["epoch"] for p, m in status["markers"].items()} == {"0": 1, "1": 1}
    assert status["prepared"] == []
    assert status["epoch_log"].startswith(f"PostgreSQL table {schema}.epoch_log at ")
    assert secret not in json.dumps(status)
    capsys.readouterr()  # the rich tables: the same, without the password
    assert main(["status", table.sink_id, "--dsn", dsn, "--control-schema", schema]) == 0
    text = capsys.readouterr().out
    assert "exit code 0" in text and secret not in text
    monkeypatch.setenv("POSTGRES_DSN", dsn)  # no Kafka address: the DSN from the environment
    code, again = eos("status", table.sink_id, "--control-schema", schema, capsys=capsys)
    assert code == 0 and again["epochs"] == status["epochs"]
    for command in ("status", "reset", "abort-lingering"):
        code, unknown = eos(command, "no-such-sink", "--control-schema", schema, capsys=capsys)
        assert code == 3 and "is unknown here" in unknown["problems"][0], unknown
    head = sql.SQL("SELECT count(*) FROM {}.epoch_log_head WHERE sink_id = %s")
    assert pg.execute(head.format(sql.Identifier(schema)), ("no-such-sink",)).fetchone() == (0,)
    code, wrong = eos("status", table.sink_id, capsys=capsys)  # the default control schema
    assert code == 3 and "--control-schema" in wrong["problems"][0]
    # reset: bound above every epoch, read back; the same reset again changes nothing
    code, out = eos("reset", *table.cli("--query", "q-new"), capsys=capsys)
    assert code == 0 and out["reset"] is True
    assert out["binding"] == {"sink_id": table.sink_id, "query_id": "q-new", "epoch_offset": 2}
    code, out = eos("reset", *table.cli("--query", "q-new"), capsys=capsys)
    assert code == 0 and out["reset"] is False
    code, status = eos("status", *table.cli(), capsys=capsys)
    assert status["binding"]["query_id"] == "q-new"


def test_a_password_never_shows_in_errors(postgres_dsn, capsys, monkeypatch, no_kafka) -> None:
    # A refused connection is retried with back-off, then escalated (the message says how
    # many attempts failed): two attempts take that path as six do, without ~15 s of
    # back-off per address.
    monkeypatch.setattr("connectors.postgres._classify.RETRY_ATTEMPTS", 2)
    secret = f"pw-{uuid.uuid4().hex[:12]}"
    for dsn, code in (
        (f"host=127.0.0.1 port=1 dbname=x password={secret} connect_timeout=2", 3),
        (f"postgresql://eos:{secret}@127.0.0.1:1/app?connect_timeout=2", 3),
        (f"host=127.0.0.1 password={secret} port", 2),  # does not parse
    ):
        got, out = eos("status", "s", "--dsn", dsn, capsys=capsys)
        assert got == code, out
        assert secret not in json.dumps(out)
    got, out = eos("status", "s", "--member", "mysql:s", "--dsn", postgres_dsn, capsys=capsys)
    assert got == 2 and "KIND:SINK_ID" in out["error"]
    assert main(["status", "s", "--member", "kafka:k", "--dsn", postgres_dsn]) == 2  # no Kafka


def test_abort_lingering_finishes_prepared_transactions_as_the_log_decided(
    spark, postgres_dsn, pg, schema, capsys, tmp_path, no_kafka
) -> None:
    table = Table(postgres_dsn, pg, schema)
    plan = faults(
        tmp_path,
        ("decided", "driver_after_decision", 1),  # epoch 1: decided commit, not delivered
        ("undecided", "driver_before_complete", 2),  # epoch 2: prepared, nothing decided
    )
    sink = table.sink(parallelism=2, stage_retries=0)
    try:
        assert sink(batch(spark, 0), 0).committed
        with pytest.raises(Exception, match="injected fault"), inject_faults(plan):
            sink(batch(spark, 1), 1)
        lingering = table.prepared()
        assert len(lingering) == 2
        code, status = eos("status", *table.cli(), capsys=capsys)
        assert code == 1 and [p["epoch"] for p in status["in_doubt"]] == [1]
        assert {"epoch": 1, "state": "commit-decided"} in status["epochs"]
        assert [(p["gid"], p["action"]) for p in status["prepared"]] == [
            (g, "commit") for g in lingering
        ]
        code, out = eos("abort-lingering", *table.cli(), capsys=capsys)
        assert code == 4 and "stop the sink's query first" in out["error"]  # it holds the log
        assert table.prepared() == lingering
    finally:
        sink.close()
    code, out = eos("reset", *table.cli(), capsys=capsys)
    assert code == 4 and "epoch 1 is not committed" in out["problems"][0]
    code, dry = eos("abort-lingering", *table.cli("--dry-run"), capsys=capsys)
    assert code == 0 and [p["action"] for p in dry["prepared"]] == ["commit", "commit"]
    assert table.prepared() == lingering and table.epochs()[1] == 0
    code, done = eos("abort-lingering", *table.cli(), capsys=capsys)
    assert code == 0 and done["committed"] == lingering and done["rolled_back"] == []
    assert table.prepared() == [] and table.epochs() == Counter({0: ROWS, 1: ROWS})
    # the next start logs the completion; epoch 2 then crashes before any decision
    with table.sink(parallelism=2, stage_retries=0) as sink, inject_faults(plan):
        assert sink(batch(spark, 1), 1).skipped
        with pytest.raises(Exception, match="injected fault"):
            sink(batch(spark, 2), 2)
    lingering = table.prepared()
    code, status = eos("status", *table.cli(), capsys=capsys)
    assert code == 1 and [p["action"] for p in status["prepared"]] == ["rollback", "rollback"]
    code, done = eos("abort-lingering", *table.cli(), capsys=capsys)
    assert code == 0 and done["rolled_back"] == lingering and done["committed"] == []
    assert table.prepared() == [] and table.epochs()[2] == 0
    with table.sink(parallelism=2) as sink:  # the replay writes epoch 2 once
        assert sink(batch(spark, 2), 2).committed
    assert table.epochs() == Counter({0: ROWS, 1: ROWS, 2: ROWS})
    code, status = eos("status", *table.cli(), capsys=capsys)
    assert code == 0 and status["last_committed_epoch"] == 2


def test_verify_a_table_passes_and_a_tampered_one_fails(
    spark, kafka_bootstrap, new_topic, postgres_dsn, pg, schema, capsys
) -> None:
    topic = new_topic("eos-pg-in", 2)
    produce_input(kafka_bootstrap, topic, 40, keys=4)
    values = [json.loads(r.value) for r in read_committed_topic(kafka_bootstrap, topic)]
    rows = spark.createDataFrame(
        [(v["id"], v["key"], v["seq"]) for v in values], "id LONG, key STRING, seq INT"
    )
    pg.execute(
        sql.SQL("CREATE TABLE {}.t (id bigint, key text, seq int)").format(sql.Identifier(schema))
    )
    sink_id = f"{schema}-v"
    with PostgresSink(
        postgres_dsn, "t", sink_id, schema=schema, control_schema=schema, parallelism=2
    ) as sink:
        assert sink(rows.where("id < 20"), 0).committed
        assert sink(rows.where("id >= 20"), 1).committed
    check = (
        "verify",
        "--input-topic",
        topic,
        "--table",
        "t",
        "--schema",
        schema,
        "--sink-id",
        sink_id,
        "--dsn",
        postgres_dsn,
        "--control-schema",
        schema,
    )
    code, ok = eos(*check, capsys=capsys, bootstrap=kafka_bootstrap)
    assert code == 0, ok
    assert ok["ok"] and ok["input_records"] == 40 and ok["table_rows"] == 40
    t = sql.SQL("{}.t").format(sql.Identifier(schema))
    pg.execute(sql.SQL("INSERT INTO {} SELECT * FROM {} WHERE id = 3").format(t, t))
    pg.execute(sql.SQL("DELETE FROM {} WHERE id = 11").format(t))
    code, bad = eos(*check, capsys=capsys, bootstrap=kafka_bootstrap)
    assert code == 1 and bad["anomalies"]["duplicate"] == 1 and bad["anomalies"]["lost"] == 1
    other = tuple("nope" if a == sink_id else a for a in check)
    code, unknown = eos(*other, capsys=capsys, bootstrap=kafka_bootstrap)
    assert code == 3, unknown  # no log of that sink: refused, never "ok"


def test_composite_status_and_abort_lingering(
    spark, kafka_bootstrap, new_topic, postgres_dsn, pg, schema, capsys, tmp_path
) -> None:
    """A Kafka-first composite (its log: the Kafka epoch log) and a PostgreSQL-first one."""
    topic, table = new_topic("eos-cmp", 2), Table(postgres_dsn, pg, schema)
    composite = f"eos-cmp-{uuid.uuid4().hex[:8]}"
    to_kafka = lambda df: df.selectExpr("CAST(id AS STRING) AS key", "v AS value")

    def both(**options: Any) -> CompositeSink:
        kafka = KafkaSink(kafka_bootstrap, topic, f"{composite}-k")
        return CompositeSink([(kafka, to_kafka), table.sink()], sink_id=composite, **options)

    members = ("--member", f"kafka:{composite}-k", "--member", f"postgres:{table.sink_id}")
    sink = both(stage_retries=0)
    try:
        assert sink(batch(spark, 0), 0).committed
        plan = faults(tmp_path, ("d", "driver_before_complete", 1))
        with pytest.raises(Exception, match="injected fault"), inject_faults(plan):
            sink(batch(spark, 1), 1)  # the topic committed epoch 1, the table prepared it
    finally:
        sink.close()
    args = (composite, *members, "--dsn", postgres_dsn, "--control-schema", schema)
    code, status = eos("status", *args, capsys=capsys, bootstrap=kafka_bootstrap)
    assert code == 1 and status["epoch_log"].startswith("Kafka epoch log topic")
    assert [p["epoch"] for p in status["in_doubt"]] == [1]
    kafka_state, pg_state = status["members"]
    assert (kafka_state["kind"], kafka_state["sink_id"]) == ("kafka", f"{composite}-k")
    assert {m["epoch"] for m in kafka_state["markers"].values()} == {1}
    assert {m["epoch"] for m in pg_state["markers"].values()} == {0}
    assert [p["action"] for p in pg_state["prepared"]] == ["rollback"]
    lingering = table.prepared()
    code, done = eos("abort-lingering", *args, capsys=capsys, bootstrap=kafka_bootstrap)
    assert code == 0 and done["members"][1]["rolled_back"] == lingering
    assert done["members"][0]["transactional_ids"][0] == f"{composite}-k-0"
    assert table.prepared() == [] and table.epochs()[1] == 0
    with both() as sink:  # the replay skips the topic's partitions and commits the table
        assert sink(batch(spark, 1), 1).committed
    assert table.epochs() == Counter({0: ROWS, 1: ROWS})
    # the table member checked from the composite's id alone: its log is found in Kafka
    member = ("--table", "t", "--schema", schema, "--sink-id", table.sink_id)
    of_composite = ("--composite-id", composite, "--members", "2", *table.cli()[1:])
    code, checked = eos(
        "verify",
        *member,
        *of_composite,
        "--expected-range",
        f"0:{2 * ROWS}",
        capsys=capsys,
        bootstrap=kafka_bootstrap,
    )
    assert code == 0 and checked["table_rows"] == 2 * ROWS, checked
    # PostgreSQL first: the composite's log is the epoch log table, under the composite's id
    other, second = Table(postgres_dsn, pg, schema, "u"), new_topic("eos-cmp2", 1)
    kafka = KafkaSink(kafka_bootstrap, second, f"{composite}-j")
    with CompositeSink([other.sink(), (kafka, to_kafka)], sink_id=f"{composite}-2") as sink:
        assert sink(batch(spark, 0), 0).committed
    args = (f"{composite}-2", "--member", f"postgres:{other.sink_id}", "--member")
    code, status = eos(
        "status",
        *args,
        f"kafka:{composite}-j",
        "--dsn",
        postgres_dsn,
        "--control-schema",
        schema,
        capsys=capsys,
        bootstrap=kafka_bootstrap,
    )
    assert code == 0 and status["epoch_log"].startswith(f"PostgreSQL table {schema}.epoch_log")
    assert [m["sink_id"] for m in status["members"]] == [other.sink_id, f"{composite}-j"]
    code, out = eos(
        "reset", f"{composite}-2", "--dsn", postgres_dsn, "--control-schema", schema, capsys=capsys
    )
    assert code == 0 and out["binding"]["epoch_offset"] == 1


# Batches of the rate source the next test writes (after them its query writes nothing).
RATE_BATCHES = 3


def test_verify_an_expected_range_checks_a_rate_source_s_table(
    spark, postgres_dsn, pg, schema, capsys, tmp_path, no_kafka
) -> None:
    """A query with no input topic (Spark's rate source) is checked against its ids.

    The rate source's values are 0, 1, 2, ... in batch order, so the rows of the batches
    written are the range 0 .. the largest value written + 1; no Kafka is reached.
    """
    table = Table(postgres_dsn, pg, schema)
    ends: list[int] = []
    with table.sink(parallelism=2) as sink:

        def each(batch: Any, batch_id: int) -> None:
            if len(ends) >= RATE_BATCHES:
                return  # past the test's batches: nothing is written
            rows = batch.selectExpr("value AS id", "concat('v', value) AS v")
            top = rows.agg({"id": "max"}).first()[0]
            assert sink(rows, batch_id).committed
            if top is not None:
                ends.append(int(top) + 1)

        query = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", "100")
            .option("numPartitions", "2")
            .load()
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .start()
        )
        try:
            wait_until(f"{RATE_BATCHES} written batches", lambda: _written(query, ends))
        finally:
            query.stop()
    end = max(ends)
    check = ("verify", "--table", "t", "--schema", schema, *table.cli()[1:], "--sink-id")
    check = (*check, table.sink_id)
    code, ok = eos(*check, "--expected-range", f"0:{end}", capsys=capsys)
    assert code == 0, ok
    assert ok["ok"] and ok["input_records"] == end and ok["table_rows"] == end
    series = f"SELECT generate_series(0, {end - 1})"
    code, by_query = eos(*check, "--expected-query", series, capsys=capsys)
    assert code == 0 and by_query["input_records"] == end, by_query
    code, short = eos(*check, "--expected-range", f"0:{end + 5}", capsys=capsys)
    assert code == 1 and short["anomalies"]["lost"] == 5, short
    capsys.readouterr()
    assert main([*check, "--expected-range", f"1:{end}"]) == 1  # id 0 is not expected
    assert "exit code 1: the check found anomalies" in capsys.readouterr().out


def _written(query: Any, ends: list[int]) -> bool:
    assert query.exception() is None, query.exception()
    return len(ends) >= RATE_BATCHES
