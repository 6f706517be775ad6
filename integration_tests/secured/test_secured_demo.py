"""``python -m connectors.demo --secure``: the demo end to end on its own SASL_SSL broker.

The demo starts minikafka with one SASL_SSL listener (SCRAM-SHA-512, certificates made in
its work directory), gives every client of the run the settings (topic creation, the input
producer, the ``kafka-rc`` source, the sink with its epoch log and markers, the checker),
says which security is in use and verifies its own output: exit 0 only when the output is
exactly once. A client that lacked the settings would be refused, and the run fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.secured, pytest.mark.timeout(600)]

# Seconds the demo may take on a loaded two-core machine (about 30 s when quiet).
DEMO_TIMEOUT_S = 500.0
RECORDS, EPOCHS = 300, 3


def test_the_demo_runs_exactly_once_on_its_secured_broker(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "connectors.demo",
            "--secure",
            "--records",
            str(RECORDS),
            "--epochs",
            str(EPOCHS),
            "--work-dir",
            str(work),
        ],
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    ca = work / "tls" / "ca.pem"
    assert (
        f"Kafka security: SASL_SSL, SASL SCRAM-SHA-512 as user 'eos-demo', TLS, trusting {ca}"
        in out
    )
    assert "exactly-once check: OK" in out
    assert f"{RECORDS}/{RECORDS}" in out  # every record committed
    assert "query stopped" not in out  # no restart was needed
