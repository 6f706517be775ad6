"""Shared fixtures for integration tests.

Kafka is reached only through a bootstrap address, chosen in this order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` if set (any real cluster);
2. a testcontainers Kafka if a Docker engine answers (a single-node KRaft broker
   configured for transactions, ``connectors.testing.containers``);
3. a minikafka broker in a subprocess (the embedded default).

PostgreSQL is reached only through a DSN, chosen in the same order: ``POSTGRES_DSN``, a
testcontainers PostgreSQL with prepared transactions, an embedded server
(``connectors.testing.postgres``).

Secured Kafka (SASL, TLS) is reached through a bootstrap address and client settings,
``secure_kafka`` / ``secure_listeners``: the listeners ``KAFKA_SECURE_CONFIG`` describes, or
secured minikafka brokers (``integration_tests.support.secure_kafka``).

A cluster whose brokers a test may stop and start, ``kafka_cluster``: the one
``KAFKA_BOOTSTRAP_SERVERS`` names with ``KAFKA_NODE_CONTROL`` (skipped, saying why, without
it), else a three-node minikafka (``integration_tests.support.kafka_cluster``).

Tests must not special-case the server behind the address.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.kafka import PRODUCER_STRATEGIES
from connectors.testing.containers import docker_answers, kafka_container
from connectors.testing.postgres import postgres_dsn as select_postgres_dsn
from integration_tests.support.kafka_cluster import KafkaCluster
from integration_tests.support.kafka_cluster import kafka_cluster as select_kafka_cluster
from integration_tests.support.secure_kafka import (
    DEFAULT_MECHANISM,
    DEFAULT_PROTOCOL,
    SecureKafka,
    SecureListeners,
    configured_listeners,
)

# Seconds to wait for a new topic's metadata to show on the broker; generous because
# the test machine is shared and busy.
TOPIC_READY_TIMEOUT_S = 30.0
# Seconds for an AdminClient request (create/delete topics) to complete.
ADMIN_REQUEST_TIMEOUT_S = 30.0

_Closable = TypeVar("_Closable")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the ``spark`` fixture ``spark`` (``make test-fast`` skips them)."""
    for item in items:
        if (
            "spark" in getattr(item, "fixturenames", ())
            and item.get_closest_marker("spark") is None
        ):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address of the Kafka cluster every integration test uses."""
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    if docker_answers():
        with kafka_container() as container:
            yield container.get_bootstrap_server()
        return
    from minikafka import BrokerProcess

    with BrokerProcess() as broker:
        yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def kafka_cluster_or_reason() -> Iterator[KafkaCluster | str]:
    """The session's stoppable cluster, or why there is none (see ``kafka_cluster``)."""
    with select_kafka_cluster() as cluster:
        yield cluster


@pytest.fixture
def kafka_cluster(kafka_cluster_or_reason: KafkaCluster | str) -> Iterator[KafkaCluster]:
    """A cluster of three or more brokers the test may stop and start (module docstring).

    Every broker the test stopped is started again after it, and the next test begins once
    Metadata lists them all.
    """
    if isinstance(kafka_cluster_or_reason, str):
        pytest.skip(kafka_cluster_or_reason)
    yield kafka_cluster_or_reason
    kafka_cluster_or_reason.restore()


@pytest.fixture(scope="session")
def secure_listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureListeners]:
    """Secured listeners by protocol and mechanism (``SecureListeners.get``), for the session."""
    listeners = SecureListeners(tmp_path_factory.mktemp("secure-kafka"), configured_listeners())
    with contextlib.closing(listeners):
        yield listeners


@pytest.fixture(scope="session")
def secure_kafka(secure_listeners: SecureListeners) -> SecureKafka:
    """A SASL_SSL listener with SCRAM-SHA-512: ``(bootstrap, settings)``.

    ``settings`` are the librdkafka settings every client needs there (security.protocol,
    sasl.mechanism, sasl.username, sasl.password, ssl.ca.location). With
    ``KAFKA_SECURE_CONFIG`` set: its SASL_SSL/SCRAM-SHA-512 listener, else its first one.
    """
    listener = secure_listeners.get(DEFAULT_PROTOCOL, DEFAULT_MECHANISM)
    if listener is None and secure_listeners.configured:
        listener = secure_listeners.configured[0]
    assert listener is not None, "KAFKA_SECURE_CONFIG names no file"
    return listener


@pytest.fixture
def closing() -> Iterator[Callable[[_Closable], _Closable]]:
    """Register an object with a ``close()`` (a sink, a client): closed when the test ends.

    A sink holds Kafka clients on the driver (its epoch log's producer), and Spark's gateway
    keeps the ``foreachBatch`` function, so the sink, alive after its query: unclosed, they
    would outlive the test and then the broker, logging connection errors to the end.
    """
    with contextlib.ExitStack() as stack:
        yield lambda thing: stack.enter_context(contextlib.closing(thing))


@pytest.fixture(params=PRODUCER_STRATEGIES)
def producer_strategy(request: pytest.FixtureRequest) -> str:
    """The Kafka sink's producer strategy: a test that takes it runs under every one.

    The reference strategy (a new producer per task) and the pooled one (producers kept
    across epochs, docs/kafka-sink.md, "Producer strategies") must keep every invariant
    under the same faults: the crash tests and the end-to-end chaos tests run both.
    """
    return str(request.param)


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """DSN of the PostgreSQL server every integration test uses (prepared transactions on)."""
    with select_postgres_dsn() as dsn:
        yield dsn


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[Any]:
    """An autocommit connection to the session's server."""
    import psycopg  # the postgres extra; Kafka-only runs never ask for this fixture

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def schema(pg: Any) -> Iterator[str]:
    """A fresh schema for the test's tables (and the sink's control tables), dropped after.

    Prepared transactions of sinks whose id starts with the schema's name are rolled back
    first (a failed test's prepared work would block the DROP).
    """
    from psycopg import sql

    name = f"t_{uuid.uuid4().hex[:12]}"
    pg.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    yield name
    leftover = pg.execute(
        "SELECT gid FROM pg_prepared_xacts WHERE left(gid, %s) = %s",
        (len(f"eos:{name}"), f"eos:{name}"),
    ).fetchall()
    for (gid,) in leftover:
        pg.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
    pg.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


class ClosableAdmin:
    """An AdminClient that ``close()`` destroys (confluent-kafka's AdminClient has no close()).

    A client lives until its last reference goes, and pytest (fixture values, tracebacks)
    keeps references past the session's teardown, so an AdminClient fixture value would
    outlive the broker, logging connection errors after the summary. The suite holds this
    handle instead, and closing it drops the only reference to the client.
    """

    def __init__(self, config: dict[str, str]) -> None:
        self._client: AdminClient | None = AdminClient(config)

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            raise RuntimeError("the test's AdminClient is closed")
        return getattr(self._client, name)

    def close(self) -> None:
        self._client = None


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> Iterator[ClosableAdmin]:
    """An AdminClient on the session's cluster, destroyed before the cluster stops."""
    with contextlib.closing(ClosableAdmin({"bootstrap.servers": kafka_bootstrap})) as admin:
        yield admin


@pytest.fixture
def new_topic(kafka_admin: ClosableAdmin) -> Iterator[Callable[..., str]]:
    """Factory: create a uniquely named topic and wait until its metadata shows it."""
    with topics_on(kafka_admin) as make:
        yield make


@contextlib.contextmanager
def topics_on(admin: ClosableAdmin) -> Iterator[Callable[..., str]]:
    """``make(prefix, partitions=1, config=None)``: a new topic through ``admin``, listed and led.

    The topics made are deleted (best effort) when the block ends. Their replication is the
    broker's ``default.replication.factor`` (-1): 1 on one broker, 3 on the three-broker
    compose file, whose ``min.insync.replicas`` 2 refuses acks=all writes to one replica.
    """
    created: list[str] = []

    def make(prefix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=-1, config=config or {})],
            request_timeout=ADMIN_REQUEST_TIMEOUT_S,
        )
        futures[name].result(timeout=ADMIN_REQUEST_TIMEOUT_S)
        wait_for_topic(admin, name, partitions)
        created.append(name)
        return name

    yield make
    if created:
        try:
            for fut in admin.delete_topics(created, request_timeout=10).values():
                fut.result(timeout=ADMIN_REQUEST_TIMEOUT_S)
        except KafkaException:
            pass  # best effort: topic names are unique, a leftover harms no other test


def wait_for_topic(admin: AdminClient | ClosableAdmin, name: str, partitions: int) -> None:
    """Block until the topic's metadata lists ``partitions`` partitions with leaders."""
    deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=5).topics.get(name)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {name} not ready after {TOPIC_READY_TIMEOUT_S}s")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One local[2] SparkSession for the whole test session."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    warehouse = Path(tmp_path_factory.mktemp("spark-warehouse"))
    session = (
        SparkSession.builder.master("local[2]")
        .appName("eos-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def rc_spark(spark: Any) -> Any:
    """The session's SparkSession with the kit's kafka-rc source registered.

    On PySpark older than the source needs the test is skipped, saying so
    (integration_tests/kafka_source/test_versions.py proves what ``register`` does there).
    """
    from connectors.kafka import MINIMUM_SPARK, register
    from connectors.kafka._source import spark_has_source_api

    if not spark_has_source_api():
        import pyspark

        pytest.skip(
            f"the kafka-rc source needs PySpark {MINIMUM_SPARK}+, not {pyspark.__version__}"
        )
    register(spark)
    return spark
