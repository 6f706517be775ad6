"""The one Kafka client factory (``connectors.kafka._client._clients``): used everywhere, logs routed.

Unit tests: an AST scan of ``connectors/`` for clients built outside the factory, the
rate limit of librdkafka's lines, and a real client (no broker listening, so librdkafka
logs connection failures) whose lines reach the Python logger and not stderr.
"""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from connectors.kafka._client import Settings, _clients, _secrets

ROOT = Path(__file__).resolve().parents[2]
FACTORY = ROOT / "connectors" / "kafka" / "_client" / "_clients.py"
CLIENT_CLASSES = frozenset(
    {
        "Producer",
        "Consumer",
        "AdminClient",
        "SerializingProducer",
        "DeserializingConsumer",
    }
)


def constructions(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every call of a confluent-kafka client class, aliases included."""
    names = set(CLIENT_CLASSES)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("confluent_kafka"):
            names.update(a.asname for a in node.names if a.name in CLIENT_CLASSES and a.asname)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = (
            func.id
            if isinstance(func, ast.Name)
            else (func.attr if isinstance(func, ast.Attribute) else None)
        )
        if name in names:
            found.append((node.lineno, name))
    return found


def test_the_scan_finds_constructions_and_aliases() -> None:
    source = textwrap.dedent("""
        import confluent_kafka
        from confluent_kafka import Consumer as C
        from confluent_kafka.admin import AdminClient
        a = confluent_kafka.Producer({})
        b = C({})
        c = AdminClient({})
        d = other({})
    """)
    assert [n for _, n in constructions(ast.parse(source))] == ["Producer", "C", "AdminClient"]


def test_every_kafka_client_in_connectors_is_built_by_the_factory() -> None:
    offenders = []
    for path in sorted((ROOT / "connectors").rglob("*.py")):
        if path == FACTORY:
            continue
        for line, name in constructions(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{path.relative_to(ROOT)}:{line}: {name}(...)")
    assert not offenders, (
        "build Kafka clients with connectors.kafka._client._clients (producer/consumer/admin), "
        "which routes librdkafka's logs and adds the kit's shared settings:\n"
        + "\n".join(offenders)
    )
    assert constructions(ast.parse(FACTORY.read_text())), "the factory itself builds clients"


def record(text: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(
        _clients.LOGGER_NAME,
        level,
        __file__,
        1,
        "%s [%s] %s",
        ("FAIL", "rdkafka#producer-1", text),
        None,
    )


def test_the_same_line_passes_once_per_window_with_the_suppressed_count() -> None:
    clock = [100.0]
    rate = _clients.RepeatFilter(window_s=10.0)
    rate_now = _clients.time.monotonic
    try:
        _clients.time.monotonic = lambda: clock[0]  # type: ignore[assignment]
        first = record("Connect to 127.0.0.1:9092 failed (after 3ms in state CONNECT)")
        assert rate.filter(first)
        # Digits differ (timings, counters): still the same line, suppressed.
        assert not rate.filter(
            record("Connect to 127.0.0.1:9092 failed (after 7ms in state CONNECT)")
        )
        assert not rate.filter(
            record("Connect to 127.0.0.1:9092 failed (after 1ms in state CONNECT)")
        )
        assert rate.filter(record("another line"))
        assert rate.filter(record("Connect to 127.0.0.1:9092 failed (after 1ms)", logging.WARNING))
        clock[0] += 10.0
        again = record("Connect to 127.0.0.1:9092 failed (after 9ms in state CONNECT)")
        assert rate.filter(again)
        assert again.getMessage().endswith("(2 similar lines suppressed)")
        clock[0] += 10.0
        quiet = record("Connect to 127.0.0.1:9092 failed (after 2ms in state CONNECT)")
        assert rate.filter(quiet)
        assert "suppressed" not in quiet.getMessage()
    finally:
        _clients.time.monotonic = rate_now  # type: ignore[assignment]


def test_the_filter_forgets_the_oldest_lines_beyond_its_bound() -> None:
    rate = _clients.RepeatFilter(window_s=1000.0, max_keys=2)
    assert rate.filter(record("a")) and rate.filter(record("b")) and rate.filter(record("c"))
    assert rate.filter(record("a"))  # forgotten: passes again
    assert not rate.filter(record("c"))


def test_librdkafka_lines_reach_the_python_logger_not_stderr() -> None:
    # A real producer towards a port nobody listens on: librdkafka logs "Connect ... failed".
    script = textwrap.dedent("""
        import logging, sys
        from connectors.kafka._client import _clients
        seen = []
        class Keep(logging.Handler):
            def emit(self, r): seen.append(r.getMessage())
        logging.getLogger("connectors.kafka").addHandler(Keep())
        logging.getLogger("connectors.kafka").propagate = False
        p = _clients.producer(_clients.Cluster(bootstrap_servers="127.0.0.1:1"),
                              {"reconnect.backoff.ms": "10", "reconnect.backoff.max.ms": "10"})
        for _ in range(30):
            p.poll(0.1)
        print(len(seen), file=sys.stdout)
        print(seen[0] if seen else "", file=sys.stdout)
    """)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    )
    count, first = out.stdout.splitlines()[:2]
    assert "FAIL" in first and "127.0.0.1:1" in first
    # Dozens of failed connects in 3 s, rate-limited to one line per distinct text.
    assert 1 <= int(count) <= 3, out.stdout
    assert "FAIL" not in out.stderr and "%3|" not in out.stderr, out.stderr


@pytest.mark.parametrize("build", [_clients.producer, _clients.consumer, _clients.admin])
def test_every_factory_function_adds_the_cluster_and_the_logger(build, monkeypatch) -> None:
    seen: list[dict[str, object]] = []
    kind = {
        _clients.producer: "Producer",
        _clients.consumer: "Consumer",
        _clients.admin: "AdminClient",
    }[build]
    monkeypatch.setattr(_clients, kind, lambda conf: seen.append(conf) or object())
    shared = Settings.of({"security.protocol": "SASL_SSL", "client.id": "app", "linger.ms": "1"})
    build(
        _clients.Cluster(bootstrap_servers="h:1", config=shared),
        {"group.id": "g", "linger.ms": "7"},
    )
    conf = seen[0]
    assert conf["bootstrap.servers"] == "h:1"
    assert conf["security.protocol"] == "SASL_SSL" and conf["client.id"] == "app"
    assert conf["linger.ms"] == "7"  # the role's own settings come on top of the shared ones
    assert conf["logger"] is logging.getLogger(_clients.LOGGER_NAME)


@pytest.mark.parametrize(
    ("build", "kind", "sparse"),
    [
        (_clients.admin, "AdminClient", False),  # connects to every broker at once
        (_clients.producer, "Producer", None),  # librdkafka's default: on demand
        (_clients.consumer, "Consumer", None),
    ],
)
def test_admin_clients_connect_to_every_broker_unless_the_user_says_otherwise(
    build, kind, sparse, monkeypatch
) -> None:
    seen: list[dict[str, object]] = []
    monkeypatch.setattr(_clients, kind, lambda conf: seen.append(conf) or object())
    build(_clients.Cluster(bootstrap_servers="h:1"), {"group.id": "g"})
    assert seen[0].get("enable.sparse.connections") is sparse
    user = Settings.of({"enable.sparse.connections": "true"})
    build(_clients.Cluster(bootstrap_servers="h:1", config=user), {"group.id": "g"})
    assert seen[1]["enable.sparse.connections"] == "true"  # the user's setting wins


def test_secret_values_are_scrubbed_from_librdkafka_lines() -> None:
    _secrets.remember({"sasl.password": "SENTINEL-in-a-log-line"})
    line = record("auth with SENTINEL-in-a-log-line failed")
    assert _clients.RepeatFilter().filter(line)
    assert "SENTINEL" not in line.getMessage() and _secrets.REDACTED in line.getMessage()


# -- the address setting's name appears in the factory only ------------------------------
def test_only_the_factory_writes_the_address_setting_name() -> None:
    # Text, not AST: strings, f-strings, docstrings and comments alike (as grep sees them).
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "connectors").rglob("*.py"))
        if path != FACTORY
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _clients.BOOTSTRAP in line
    ]
    assert not offenders, (
        f"{_clients.BOOTSTRAP!r} written outside connectors/kafka/_client/_clients.py (build clients "
        "from a _clients.Cluster; name the option with _clients.BOOTSTRAP):\n"
        + "\n".join(offenders)
    )
    assert _clients.BOOTSTRAP == "bootstrap.servers"
    assert f'BOOTSTRAP = "{_clients.BOOTSTRAP}"' in FACTORY.read_text()
