"""The operations CLI (``eos``) against a real broker, through the bootstrap address."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.kafka import DEFAULT_MARKER_TOPIC, KafkaEpochLog
from connectors.ops import main
from connectors.verify import end_offsets, produce_input, read_committed_topic
from txn import EpochCompletion, EpochPlan, FileEpochLog, QueryBinding

# Seconds for the hand-made transaction's calls.
TXN_TIMEOUT_S = 30.0


def eos(bootstrap: str, *args: str, capsys: Any) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["--bootstrap-servers", bootstrap, "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def sink_log(tmp_path: Path, sink_id: str, *records: Any) -> str:
    path = tmp_path / "epochs.log"
    with FileEpochLog(path, sink_id=sink_id) as log:
        for record in records:
            log.append(record)
    return str(path)


def test_abort_lingering_ends_a_real_open_transaction(kafka_bootstrap, new_topic, tmp_path, capsys):
    topic, sink_id = new_topic("eos-al", 1), f"eos-{uuid.uuid4().hex[:8]}"
    log = sink_log(
        tmp_path, sink_id, EpochPlan(sink_id=sink_id, epoch=0, parallelism=2, fingerprint="fp")
    )
    # a zombie on worker lane 2 of write partition 1 (the highest of the default 2 lanes)
    zombie = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{sink_id}-1.2"})
    zombie.init_transactions(TXN_TIMEOUT_S)
    zombie.begin_transaction()
    zombie.produce(topic, b"left open")
    zombie.flush(TXN_TIMEOUT_S)
    code, status = eos(
        kafka_bootstrap,
        "status",
        sink_id,
        "--epoch-log",
        log,
        "--topic",
        topic,
        "--scan",
        capsys=capsys,
    )
    assert code == 1  # an epoch in doubt, an open transaction
    assert status["outputs"][0]["partitions"][0]["lso_lag"] == 1
    assert len(status["outputs"][0]["partitions"][0]["open_transactions"]) == 1
    code, dry = eos(
        kafka_bootstrap, "abort-lingering", sink_id, "--epoch-log", log, "--dry-run", capsys=capsys
    )
    # the shared lane (the partition's own id) and worker lanes 1 and 2 of each partition
    lanes = [f"{sink_id}-{p}{k}" for p in (0, 1) for k in ("", ".1", ".2")]
    assert code == 0 and dry["transactional_ids"] == lanes
    assert not dry["aborted"]
    code, done = eos(kafka_bootstrap, "abort-lingering", sink_id, "--epoch-log", log, capsys=capsys)
    assert code == 0 and done["aborted"]
    lso = end_offsets(kafka_bootstrap, topic, "read_committed")
    hw = end_offsets(kafka_bootstrap, topic, "read_uncommitted")
    assert lso == hw, "the open transaction still pins the last stable offset"


def test_preflight_reports_missing_topics_and_the_names_a_sink_uses(
    kafka_bootstrap, new_topic, capsys
):
    topic = new_topic("eos-pf", 1)

    def preflight(*args: str) -> tuple[int, dict[str, Any]]:
        return eos(
            kafka_bootstrap, "preflight", "--topic", topic, "--sink-id", "s1", *args, capsys=capsys
        )

    code, ok = preflight("--parallelism", "2")
    assert code == 0 and ok["topics"] == {topic: True}
    # each partition's shared lane, then its worker lanes (producer_lanes, default 2)
    assert ok["names"]["transactional_ids"] == [
        "s1-0",
        "s1-0.1",
        "s1-0.2",
        "s1-1",
        "s1-1.1",
        "s1-1.2",
    ]
    assert ok["names"]["marker_groups"] == ["s1.marker.0", "s1.marker.1"]
    acls = {(a["resource_type"], a["pattern_type"], a["name"]): a["operations"] for a in ok["acls"]}
    assert acls[("TOPIC", "LITERAL", topic)] == ["WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"]
    assert acls[("TRANSACTIONAL_ID", "PREFIXED", "s1")] == ["WRITE", "DESCRIBE"]
    assert acls[("GROUP", "PREFIXED", "s1.")] == ["READ", "DESCRIBE"]
    assert ("TOPIC", "LITERAL", DEFAULT_MARKER_TOPIC) in acls
    assert ("CLUSTER", "LITERAL", "kafka-cluster") in acls
    assert ok["transaction_max_timeout_ms"] >= ok["transaction_timeout_ms"]
    code, one = preflight("--parallelism", "1", "--producer-lanes", "1")
    assert code == 0 and one["names"]["transactional_ids"] == ["s1-0", "s1-0.1"]
    code, bad = eos(
        kafka_bootstrap,
        "preflight",
        "--topic",
        "eos-no-such-topic",
        "--transaction-timeout-ms",
        str(10**9),
        capsys=capsys,
    )
    assert code == 1 and len(bad["problems"]) == 2


def test_preflight_warns_about_a_weak_topic_and_strict_makes_it_a_problem(
    kafka_bootstrap, new_topic, capsys
):
    weak = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
    topic = new_topic("eos-weak", 1, config=weak)  # replication 1
    code, report = eos(kafka_bootstrap, "preflight", "--topic", topic, capsys=capsys)
    about_topic = [w for w in report["warnings"] if w.startswith(f"topic {topic!r}: ")]
    assert code == 0 and len(about_topic) == 3, report["warnings"]
    assert report["problems"] == []
    code, strict = eos(kafka_bootstrap, "preflight", "--topic", topic, "--strict", capsys=capsys)
    assert code == 1 and strict["problems"] == strict["warnings"] == report["warnings"]


def test_preflight_of_a_strong_topic_on_three_brokers_warns_of_nothing(kafka_cluster, capsys):
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    topic = f"eos-strong-{uuid.uuid4().hex[:8]}"
    config = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    new = NewTopic(topic, num_partitions=1, replication_factor=3, config=config)
    admin.create_topics([new])[topic].result(timeout=TXN_TIMEOUT_S)
    try:
        code, report = eos(
            kafka_cluster.bootstrap, "preflight", "--topic", topic, "--strict", capsys=capsys
        )
    finally:
        admin.delete_topics([topic])[topic].result(timeout=TXN_TIMEOUT_S)
    # a real cluster's own transaction state log settings may be weak: only the topic is ours
    assert not [w for w in report["warnings"] if w.startswith(f"topic {topic!r}")]
    assert code == (1 if report["warnings"] else 0)


def test_verify_passes_an_exact_copy_and_fails_a_duplicate(kafka_bootstrap, new_topic, capsys):
    source, good, bad = new_topic("eos-in", 2), new_topic("eos-ok", 1), new_topic("eos-dup", 1)
    produce_input(kafka_bootstrap, source, 30, keys=3)
    records = sorted(
        read_committed_topic(kafka_bootstrap, source), key=lambda r: (r.partition, r.offset)
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for r in records:
        producer.produce(good, r.value, r.key)
        producer.produce(bad, r.value, r.key)
    producer.produce(bad, records[0].value, records[0].key)
    producer.flush(TXN_TIMEOUT_S)
    code, ok = eos(
        kafka_bootstrap, "verify", "--input-topic", source, "--output-topic", good, capsys=capsys
    )
    assert code == 0 and ok["ok"] and ok["committed_records"] == 30
    code, dup = eos(
        kafka_bootstrap, "verify", "--input-topic", source, "--output-topic", bad, capsys=capsys
    )
    assert code == 1 and dup["anomalies"]["duplicate"] == 1


def test_reset_binds_the_next_query_above_every_epoch_and_refuses_in_doubt(
    kafka_bootstrap, tmp_path, capsys
):
    sink_id = f"eos-{uuid.uuid4().hex[:8]}"
    done = [
        EpochPlan(sink_id=sink_id, epoch=0, parallelism=1, fingerprint="fp"),
        EpochCompletion(sink_id, 0, committed=True),
    ]
    log = sink_log(tmp_path, sink_id, QueryBinding(sink_id, "q-old", 0), *done)
    code, out = eos(
        kafka_bootstrap, "reset", sink_id, "--epoch-log", log, "--query", "q-new", capsys=capsys
    )
    assert code == 0 and out["binding"] == {
        "sink_id": sink_id,
        "query_id": "q-new",
        "epoch_offset": 1,
    }
    with FileEpochLog(log, sink_id=sink_id) as opened:
        opened.append(
            EpochPlan(sink_id=sink_id, epoch=1, parallelism=1, fingerprint="fp")
        )  # epoch 1 of q-new, left in doubt
    code, refused = eos(kafka_bootstrap, "reset", sink_id, "--epoch-log", log, capsys=capsys)
    assert code == 4 and "epoch 1 is not committed" in refused["problems"][0]


@pytest.mark.compat
def test_status_of_a_healthy_sink_and_the_console_script(kafka_bootstrap, tmp_path, capsys):
    sink_id = f"eos-{uuid.uuid4().hex[:8]}"
    log = sink_log(
        tmp_path,
        sink_id,
        EpochPlan(sink_id=sink_id, epoch=0, parallelism=1, fingerprint="fp"),
        EpochCompletion(sink_id, 0, committed=True),
    )
    code, status = eos(kafka_bootstrap, "status", sink_id, "--epoch-log", log, capsys=capsys)
    assert code == 0 and status["last_committed_epoch"] == 0 and status["in_doubt"] == []
    assert status["markers"] == {"0": None}  # nothing committed through Kafka by this log
    text = subprocess.run(
        [
            sys.executable,
            "-m",
            "connectors.ops",
            "--bootstrap-servers",
            kafka_bootstrap,
            "status",
            sink_id,
            "--epoch-log",
            log,
            "--marker-topic",
            DEFAULT_MARKER_TOPIC,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert text.returncode == 0, text.stderr
    assert "eos status" in text.stdout and "exit code 0" in text.stdout


def test_bad_arguments_exit_2(capsys):
    assert main(["status"]) == 2
    assert main(["--bootstrap-servers", "x:1", "frobnicate"]) == 2


def test_status_and_reset_of_an_unknown_sink_id_are_refused_never_healthy(
    kafka_bootstrap, tmp_path, capsys
):
    unknown, other = f"eos-never-{uuid.uuid4().hex[:8]}", f"eos-{uuid.uuid4().hex[:8]}"
    log_topic = f"eos-log-{uuid.uuid4().hex[:8]}"
    missing_topic = ("--epoch-log-topic", f"eos-log-{uuid.uuid4().hex[:8]}")
    code, out = eos(kafka_bootstrap, "status", unknown, *missing_topic, capsys=capsys)
    assert code == 3 and "does not exist" in out["problems"][0]
    with KafkaEpochLog(kafka_bootstrap, other, topic=log_topic) as log:  # another sink's log
        log.append(EpochPlan(sink_id=other, epoch=0, parallelism=1, fingerprint="fp"))
        log.append(EpochCompletion(other, 0, committed=True))
    for command in ("status", "reset", "abort-lingering"):
        code, out = eos(
            kafka_bootstrap, command, unknown, "--epoch-log-topic", log_topic, capsys=capsys
        )
        assert code == 3, out
        assert f"sink {unknown!r} is unknown here" in out["problems"][0]
        assert "holds no record of it" in out["problems"][0]
        assert "healthy" not in json.dumps(out) and "reset" not in out
    code, out = eos(kafka_bootstrap, "status", other, "--epoch-log-topic", log_topic, capsys=capsys)
    assert code == 0 and out["last_committed_epoch"] == 0
    # the known sink in the same Kafka log: reset takes effect and reads back
    code, out = eos(
        kafka_bootstrap,
        "reset",
        other,
        "--epoch-log-topic",
        log_topic,
        "--query",
        "q-new",
        capsys=capsys,
    )
    assert code == 0 and out["reset"] is True and out["binding"]["epoch_offset"] == 1
    code, out = eos(kafka_bootstrap, "status", other, "--epoch-log-topic", log_topic, capsys=capsys)
    assert out["binding"]["query_id"] == "q-new"
    # a FileEpochLog path that does not exist: refused, and reset creates no file
    missing = tmp_path / "no" / "epochs.log"
    code, out = eos(kafka_bootstrap, "reset", unknown, "--epoch-log", str(missing), capsys=capsys)
    assert code == 3 and "no epoch log file" in out["problems"][0]
    assert not missing.exists() and not missing.parent.exists()
    # abort-lingering of a sink that is gone: the ids to abort can be given
    code, out = eos(
        kafka_bootstrap,
        "abort-lingering",
        unknown,
        "--parallelism",
        "1",
        "--dry-run",
        capsys=capsys,
    )
    default = [f"{unknown}-0", f"{unknown}-0.1", f"{unknown}-0.2"]
    assert code == 0 and out["transactional_ids"] == default
    code, out = eos(
        kafka_bootstrap,
        "abort-lingering",
        unknown,
        "--parallelism",
        "1",
        "--lanes",
        "3",
        "--dry-run",
        capsys=capsys,
    )
    assert out["transactional_ids"] == [*default, f"{unknown}-0.3"]


def test_a_connection_string_as_epoch_log_is_a_typed_refusal(kafka_bootstrap, capsys):
    sink_id = f"eos-pg-{uuid.uuid4().hex[:8]}"
    for dsn in (
        "postgresql://eos:s3cret@db.example:5432/app",
        "host=db.example dbname=app password=s3cret",
    ):
        for command in ("status", "reset"):
            code, out = eos(kafka_bootstrap, command, sink_id, "--epoch-log", dsn, capsys=capsys)
            assert code == 4, out
            assert "UnreadableLogError" in out["error"] and "PostgreSQL" in out["error"]
            assert "--dsn" in out["error"]
            assert "s3cret" not in json.dumps(out)  # a DSN's password is never printed


def test_reset_that_changes_nothing_does_not_report_success(kafka_bootstrap, tmp_path, capsys):
    sink_id = f"eos-{uuid.uuid4().hex[:8]}"
    log = sink_log(
        tmp_path,
        sink_id,
        EpochPlan(sink_id=sink_id, epoch=0, parallelism=1, fingerprint="fp"),
        EpochCompletion(sink_id, 0, committed=True),
    )
    code, first = eos(
        kafka_bootstrap, "reset", sink_id, "--epoch-log", log, "--query", "q2", capsys=capsys
    )
    assert code == 0 and first["reset"] is True
    code, again = eos(
        kafka_bootstrap, "reset", sink_id, "--epoch-log", log, "--query", "q2", capsys=capsys
    )
    assert code == 0 and again["reset"] is False and "nothing changed" in again["note"]
    assert again["binding"] == first["binding"]


def test_help_lists_the_exit_codes(capsys):
    for argv in (["--help"], ["status", "--help"], ["verify", "--help"]):
        capsys.readouterr()
        assert main(argv) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "exit codes: 0" in text and "4 the command was refused" in text


def copy_records(bootstrap: str, source: str, target: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for r in sorted(read_committed_topic(bootstrap, source), key=lambda r: (r.partition, r.offset)):
        producer.produce(target, r.value, r.key)
    producer.flush(TXN_TIMEOUT_S)


def test_verify_with_an_identity_function_on_non_json_records(kafka_bootstrap, new_topic, capsys):
    source, out = new_topic("eos-csv-in", 1), new_topic("eos-csv-out", 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(12):
        producer.produce(source, f"r-{i},acct-{i % 3},{i * 10}".encode(), f"k{i}".encode())
    producer.flush(TXN_TIMEOUT_S)
    copy_records(kafka_bootstrap, source, out)
    topics = ("--input-topic", source, "--output-topic", out)
    code, bad = eos(kafka_bootstrap, "verify", *topics, capsys=capsys)
    assert code == 2, bad  # not "the cluster could not be read"
    assert "RecordFormatError" in bad["error"] and "is not JSON" in bad["error"]
    code, ok = eos(
        kafka_bootstrap,
        "verify",
        *topics,
        "--id-fn",
        "tests.testing.verify.idfns:csv_id",
        "--order-key-fn",
        "tests.testing.verify.idfns:csv_account",
        capsys=capsys,
    )
    assert code == 0 and ok["ok"] and ok["committed_records"] == 12
    code, bad_fn = eos(kafka_bootstrap, "verify", *topics, "--id-fn", "tests.nope:f", capsys=capsys)
    assert code == 2 and "cannot load 'tests.nope:f'" in bad_fn["error"]


@pytest.mark.spark
def test_verify_a_sink_with_a_custom_marker_topic_and_its_own_record_format(
    spark, kafka_bootstrap, new_topic, capsys, closing
):
    from connectors.kafka import KafkaSink

    source, out = new_topic("eos-own-in", 2), new_topic("eos-own-out", 2)
    sink_id, markers = f"eos-{uuid.uuid4().hex[:8]}", f"eos-mk-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(40):  # the user's own format: nested id, ordered per account
        value = json.dumps({"order": {"id": f"o-{i}"}, "account": f"a{i % 4}", "n": i})
        producer.produce(source, value.encode(), f"a{i % 4}".encode())
    producer.flush(TXN_TIMEOUT_S)
    rows = [
        (r.key.decode(), r.value.decode(), n)
        for n, r in enumerate(
            sorted(
                read_committed_topic(kafka_bootstrap, source), key=lambda r: (r.partition, r.offset)
            )
        )
    ]
    df = spark.createDataFrame(rows, "key STRING, value STRING, seq INT")
    sink = closing(
        KafkaSink(
            kafka_bootstrap, out, sink_id, marker_topic=markers, parallelism=2, order_by=["seq"]
        )
    )
    sink(df.where("seq < 25"), 0)
    sink(df.where("seq >= 25"), 1)
    sink.close()
    check = (
        "verify",
        "--input-topic",
        source,
        "--output-topic",
        out,
        "--sink-id",
        sink_id,
        "--id-field",
        "order.id",
        "--order-key-field",
        "account",
    )
    code, healthy = eos(kafka_bootstrap, *check, "--marker-topic", markers, capsys=capsys)
    assert code == 0, (healthy["problems"], healthy["notes"])
    assert healthy["committed_records"] == 40 and healthy["anomalies"]["epoch_log_mismatch"] == 0
    # without the sink's marker topic the markers are looked up in the default one
    code, wrong = eos(kafka_bootstrap, *check, capsys=capsys)
    assert code == 1 and wrong["anomalies"]["epoch_log_mismatch"] == 2
    code, unfit = eos(kafka_bootstrap, *check[:7], "--marker-topic", markers, capsys=capsys)
    assert code == 2 and "has no field 'id'" in unfit["error"]


@pytest.mark.spark
def test_verify_a_member_of_a_composite_sink(spark, kafka_bootstrap, new_topic, capsys, closing):
    from connectors.kafka import KafkaSink
    from connectors.stage import CompositeSink

    source, out_a, out_b = (
        new_topic("eos-cmp-in", 1),
        new_topic("eos-cmp-a", 1),
        new_topic("eos-cmp-b", 1),
    )
    composite = f"eos-cmp-{uuid.uuid4().hex[:8]}"
    log_topic = f"eos-cmp-log-{uuid.uuid4().hex[:8]}"
    produce_input(kafka_bootstrap, source, 30, keys=3)
    rows = [
        (r.key.decode(), r.value.decode(), n)
        for n, r in enumerate(
            sorted(
                read_committed_topic(kafka_bootstrap, source), key=lambda r: (r.partition, r.offset)
            )
        )
    ]
    df = spark.createDataFrame(rows, "key STRING, value STRING, seq INT")
    members = [
        KafkaSink(
            kafka_bootstrap,
            out,
            f"{composite}-{n}",
            parallelism=1,
            order_by=["seq"],
            epoch_log_topic=log_topic,
        )
        for n, out in (("a", out_a), ("b", out_b))
    ]
    sink = closing(
        CompositeSink([(members[0], ["key", "value", "seq"]), members[1]], sink_id=composite)
    )
    for epoch in range(2):
        sink(df.where(f"seq >= {15 * epoch} AND seq < {15 * (epoch + 1)}"), epoch)
    assert sink.metrics()[-1].member_rows == {f"{composite}-a": 15, f"{composite}-b": 15}
    sink.close()
    for member, out in ((f"{composite}-a", out_a), (f"{composite}-b", out_b)):
        check = (
            "verify",
            "--input-topic",
            source,
            "--output-topic",
            out,
            "--sink-id",
            member,
            "--epoch-log-topic",
            log_topic,
        )
        code, ok = eos(
            kafka_bootstrap, *check, "--composite-id", composite, "--members", "2", capsys=capsys
        )
        assert code == 0, (ok["problems"], ok["notes"])
        # without --composite-id the member's own id has no log: refused, not healthy
        code, alone = eos(kafka_bootstrap, *check, capsys=capsys)
        assert code == 3 and "is unknown here" in alone["problems"][0]
    code, bad = eos(
        kafka_bootstrap,
        "verify",
        "--input-topic",
        source,
        "--output-topic",
        out_a,
        "--composite-id",
        composite,
        capsys=capsys,
    )
    assert code == 2 and "--composite-id and --members go together" in bad["error"]


def test_status_prints_one_line_per_epoch_and_the_plans_with_verbose(
    kafka_bootstrap, tmp_path, capsys
):
    sink_id = f"eos-{uuid.uuid4().hex[:8]}"
    epochs = [
        r
        for e in range(15)
        for r in (
            EpochPlan(sink_id=sink_id, epoch=e, parallelism=2, fingerprint="fp"),
            EpochCompletion(sink_id, e, committed=True),
        )
    ]
    log = sink_log(tmp_path, sink_id, *epochs)
    argv = ["--bootstrap-servers", kafka_bootstrap, "status", sink_id, "--epoch-log", log]
    capsys.readouterr()
    assert main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "epoch=" in line]
    assert len(lines) == 15 and all("state=committed" in line for line in lines), lines
    assert not any("parallelism" in line for line in lines)
    assert main([*argv, "--verbose"]) == 0
    verbose = capsys.readouterr().out
    assert verbose.count('"parallelism": 2') == 15 and verbose.count('"attempt": 0') == 15
    code, doc = eos(
        kafka_bootstrap, "status", sink_id, "--epoch-log", log, "--verbose", capsys=capsys
    )
    assert code == 0 and doc["epochs"][3] == {
        "epoch": 3,
        "state": "committed",
        "parallelism": 2,
        "attempt": 0,
        "mode": "aligned",
        "guarantee": "exactly-once",
    }


def test_verify_counts_the_dead_letter_topic_with_the_kafka_key_as_id(
    kafka_bootstrap, new_topic, capsys
):
    source, output, dlq = new_topic("eos-in", 2), new_topic("eos-out", 1), new_topic("eos-dlq", 1)
    both = new_topic("eos-dlq-both", 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(20):  # values in no JSON format: the id is the Kafka key
        producer.produce(source, f"\x00payload {i}".encode(), f"r{i}".encode())
        producer.produce(output if i < 15 else dlq, f"\x00out {i}".encode(), f"r{i}".encode())
        if i >= 15 or i == 2:
            producer.produce(both, b"\x00dead", f"r{i}".encode())
    producer.flush(TXN_TIMEOUT_S)
    check = ("verify", "--input-topic", source, "--output-topic", output, "--id-by-kafka-key")
    code, ok = eos(kafka_bootstrap, *check, "--dead-letter-topic", dlq, capsys=capsys)
    assert code == 0, ok
    assert ok["input_records"] == 20 and ok["dead_letter_records"] == 5
    code, lost = eos(kafka_bootstrap, *check, capsys=capsys)  # the dead letters not counted
    assert code == 1 and lost["anomalies"]["lost"] == 5, lost
    code, bad = eos(kafka_bootstrap, *check, "--dead-letter-topic", both, capsys=capsys)
    assert code == 1 and bad["anomalies"]["dead_lettered_and_written"] == 1, bad
    assert sum(bad["anomalies"].values()) == 1
