"""The sink's exactly-once chaos cases on a SASL_SSL listener, operated with ``eos``.

The cases of ``integration_tests/e2e/test_chaos.py`` (``e2e/_cases.py``), on the
``secure_kafka`` listener: every client of the run (the app's sink with its epoch log and
markers, the checker with its raw Fetch scan, ``eos``) gets the listener's settings, and a
client that lacked them would be refused. One case kills the whole application with epoch
1 partly committed (unaligned); between that kill and the restart an operator runs every
``eos`` subcommand with ``--command-config`` (a Java properties file with a SCRAM
``sasl.jaas.config`` line), and again once the restart finished the epochs. The other
case, a Python worker killed mid-write (aligned), runs beside that restart in the same
application (``_together``): its fault stays inside its own query, and an application
run costs a JVM start.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from connectors.demo.app import EpochLine
from connectors.verify import CheckReport
from integration_tests.e2e._cases import kill_app_with_epoch_partly_committed, worker_kill_case
from integration_tests.e2e._scenario import APP_RUN_TIMEOUT_S, CHUNK, Scenario
from integration_tests.e2e._together import Case, run_cases
from integration_tests.support.secure_kafka import SecureKafka

pytestmark = [
    pytest.mark.spark,
    pytest.mark.e2e,
    pytest.mark.secured,
    pytest.mark.timeout(900),
]

# Three epochs of CHUNK records: the cases fault epoch 1, and one epoch follows it.
N_RECORDS = 3 * CHUNK
# Seconds for the transaction coordinator to write the abort markers of an aborted
# transaction (they are written after abort-lingering returns).
SETTLE_S = 60.0


@pytest.fixture
def named(
    secure_kafka: SecureKafka, tmp_path: Path, secure_topic: Callable[..., str]
) -> Callable[[str], Scenario]:
    """``named(name)``: a scenario of its own on the secured listener, in ``tmp_path / name``."""
    return lambda name: Scenario.create(
        secure_kafka.bootstrap,
        tmp_path / name,
        secure_topic,
        n=N_RECORDS,
        client_config=secure_kafka.settings,
    )


def test_application_killed_unaligned_then_operated_and_restarted_beside_a_worker_kill(
    named: Callable[[str], Scenario], tmp_path: Path
) -> None:
    scenario = named("app-killed")
    killed = kill_app_with_epoch_partly_committed(scenario, "unaligned")
    killed.after_kill()
    operate_the_stopped_sink(scenario)

    def finish(epochs: Sequence[EpochLine]) -> None:
        operate_the_finished_sink(scenario, killed.finish(epochs))

    cases = {
        "application killed, unaligned: the restart": Case(killed.config, finish),
        "python worker killed mid-write, aligned": worker_kill_case(named("worker"), "aligned"),
    }
    run_cases(cases, tmp_path / "apps", APP_RUN_TIMEOUT_S)


def operate_the_finished_sink(scenario: Scenario, report: CheckReport) -> None:
    """After the restart: every ``eos`` subcommand over TLS + SCRAM sees the epochs done."""
    # The raw scan over TLS + SCRAM saw the killed attempt's transaction aborted.
    assert report.abort_markers >= 1 and report.aborted_records >= 1, report
    last = N_RECORDS // CHUNK - 1
    sink, out = scenario.sink_id, scenario.output_topic
    code, status = scenario.eos("status", sink, "--topic", out, "--scan")
    assert code == 0, status
    assert status["last_committed_epoch"] == last and status["in_doubt"] == []
    assert [o["open_transactions"] for o in status["outputs"][0]["partitions"]] == [[]] * 3
    code, verify = scenario.eos(*verify_args(scenario))
    assert code == 0 and verify["ok"], verify
    assert verify["committed_records"] == verify["input_records"] == N_RECORDS
    code, preflight = scenario.eos("preflight", "--topic", out, "--sink-id", sink)
    assert code == 0 and preflight["topics"] == {out: True}, preflight
    lanes = [f"{sink}-{p}{k}" for p in (0, 1) for k in ("", ".1", ".2")]
    assert preflight["names"]["transactional_ids"] == lanes
    code, reset = scenario.eos("reset", sink, "--query", "next-query")
    assert code == 0 and reset["reset"] is True, reset
    code, status = scenario.eos("status", sink)
    assert code == 0 and status["binding"]["query_id"] == "next-query", status


def verify_args(scenario: Scenario) -> list[str]:
    return [
        "verify",
        "--input-topic",
        scenario.input_topic,
        "--output-topic",
        scenario.output_topic,
        "--sink-id",
        scenario.sink_id,
    ]


def operate_the_stopped_sink(scenario: Scenario) -> None:
    """Epoch 1 is in doubt and write partition 1's transaction open: look, refuse, abort."""
    sink, out = scenario.sink_id, scenario.output_topic
    code, status = scenario.eos("status", sink, "--topic", out, "--scan")
    assert code == 1, status
    assert [p["epoch"] for p in status["in_doubt"]] == [1]
    assert {p: m["epoch"] for p, m in status["markers"].items()} == {"0": 1, "1": 0}
    partitions = status["outputs"][0]["partitions"]
    assert sum(len(p["open_transactions"]) for p in partitions) >= 1, partitions
    # The checker sees both, the open transaction also in its raw scan over TLS + SCRAM.
    code, verify = scenario.eos(*verify_args(scenario))
    assert code == 1, verify
    assert verify["anomalies"]["in_doubt_epoch"] == 1, verify
    assert verify["anomalies"]["open_transaction"] >= 1, verify
    code, reset = scenario.eos("reset", sink)
    assert code == 4, reset  # refused: the epoch in doubt must be finished first
    code, aborted = scenario.eos("abort-lingering", sink)
    assert code == 0 and aborted["aborted"] is True, aborted
    # every producer lane of both partitions: the shared lane (the partition's own id) and
    # worker lanes 1 and 2
    lanes = [f"{sink}-{p}{k}" for p in (0, 1) for k in ("", ".1", ".2")]
    assert aborted["transactional_ids"] == lanes
    deadline = time.monotonic() + SETTLE_S
    while True:
        code, status = scenario.eos("status", sink, "--topic", out)
        lags = [p["lso_lag"] for p in status["outputs"][0]["partitions"]]
        if lags == [0, 0, 0]:
            break
        assert time.monotonic() < deadline, f"the aborted transaction stays open: {lags}"
        time.sleep(0.5)
    assert code == 1 and [p["epoch"] for p in status["in_doubt"]] == [1]  # the restart's job
