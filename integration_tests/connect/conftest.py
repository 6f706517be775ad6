"""Fixtures of the Spark Connect tests: one Connect server for the whole session.

``SPARK_CONNECT_URL`` (``sc://host:port``) selects an existing server instead. Otherwise
the server starts on 127.0.0.1 from the pyspark package's own jars
(``integration_tests.support.spark_connect``), its application on ``local[2]``, and is stopped at
the end. Clients run in processes of their own (``_client``): a Connect session switches
its whole process into Connect mode, which would break the classic sessions of the other
tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration_tests.support.spark_connect import ConnectServer, connect_server_url

# Seconds one client scenario may take (a streaming query of a few epochs, busy machine).
CLIENT_TIMEOUT_S = 600.0
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of the session's Spark Connect server (started here unless SPARK_CONNECT_URL)."""
    external = connect_server_url()
    if external:
        yield external
        return
    with ConnectServer(tmp_path_factory.mktemp("spark-connect")) as server:
        yield server.url


def run_client(url: str, scenario: str, args: dict[str, Any], log: Path) -> dict[str, Any]:
    """Run one ``_client`` scenario against ``url``; return its RESULT document."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "integration_tests.connect._client",
            scenario,
            url,
            json.dumps(args),
        ],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        cwd=REPO,
        check=False,
    )
    log.write_text(f"{proc.stdout}\n---- stderr ----\n{proc.stderr}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"client {scenario} printed no RESULT (exit {proc.returncode}); see {log}"
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result
