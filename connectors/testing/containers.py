"""testcontainers configurations that can run the kit's transactions on one node.

Used by the integration fixtures only where a Docker engine answers
(:func:`docker_answers`); otherwise the suite runs on minikafka and the embedded
PostgreSQL. ``docker/docker-compose.yml`` holds the same settings for a manual run.

* Kafka (:func:`kafka_container`): one Apache Kafka node in KRaft mode (broker and
  controller in one process). Kafka's defaults replicate the transaction state log 3 times
  with a min ISR of 2, which one broker can never satisfy: ``init_transactions`` would
  fail. So the transaction state log gets replication factor 1 and min ISR 1, and the
  offsets topic replication factor 1 (consumer groups and transactional offset commits).
* PostgreSQL (:func:`postgres_container`): the official image with
  ``max_prepared_transactions`` > 0 (its default 0 disables ``PREPARE TRANSACTION``).

:class:`ContainerPostgres` wraps the PostgreSQL container with the controls of
``EmbeddedPostgres`` (restart, kill -9) for the crash tests.

The advertised Kafka listener must name the host port Docker maps, which is known only
once the container runs; as in testcontainers' own Kafka modules, the container waits for
a start script that :meth:`KafkaKraftContainer.start` copies in after the start.

With ``sasl=KafkaSasl(...)`` the client listener is ``SASL_PLAINTEXT`` instead, with PLAIN,
SCRAM-SHA-256 and SCRAM-SHA-512 enabled for one user: PLAIN's user from the JAAS file the
start script is handed, the SCRAM credentials created with ``kafka-configs.sh`` once the
broker runs (over the inter-broker listener inside the container). Clients take
:meth:`KafkaSasl.client_settings`. No TLS listener: run a TLS broker yourself and point
``KAFKA_SECURE_CONFIG`` at it (docker/README.md).
"""

from __future__ import annotations

import importlib
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from connectors._extras import require

require(
    "testcontainers",
    extra="testing",
    needed_for="the testcontainers fixtures (connectors.testing.containers)",
)

from testcontainers.community.postgres import PostgresContainer  # after the check above
from testcontainers.core.container import DockerContainer
from testcontainers.core.wait_strategies import LogMessageWaitStrategy

KAFKA_IMAGE = "apache/kafka:3.9.1"
POSTGRES_IMAGE = "postgres:18"
# The client listener inside the container (mapped to a free host port).
KAFKA_PORT = 9092
# Listener the broker uses to reach itself (inter-broker traffic) and the controller's.
KAFKA_BROKER_PORT = 19092
KAFKA_CONTROLLER_PORT = 9093
KAFKA_START_SCRIPT = "/tmp/eos-kafka-start.sh"  # noqa: S108 - a path inside the container
KAFKA_SCRIPT_READY = "/tmp/eos-kafka-start.ready"  # noqa: S108 - a path inside the container
KAFKA_JAAS_FILE = "/tmp/eos-kafka-jaas.conf"  # noqa: S108 - a path inside the container
KAFKA_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
KAFKA_CLUSTER_ID = "eosKitSingleNode00001w"
KAFKA_STARTED = re.compile(r"Kafka Server started")
# Seconds for the broker to start (image already pulled); KRaft formats its storage first.
KAFKA_START_TIMEOUT_S = 120
# Seconds to wait for PostgreSQL to accept connections after a (re)start.
POSTGRES_READY_TIMEOUT_S = 60.0
# Seconds the Docker ping may take before we conclude that no engine answers.
DOCKER_PING_TIMEOUT_S = 3
# Prepared-transaction slots of the PostgreSQL container (several sinks of parallelism 8).
POSTGRES_MAX_PREPARED_TRANSACTIONS = 64


def docker_answers() -> bool:
    """Whether a Docker engine answers a ping (then testcontainers can be used)."""
    try:
        # Imported by name: the repository's docker/ folder would shadow it for mypy.
        docker: Any = importlib.import_module("docker")
        docker.from_env(timeout=DOCKER_PING_TIMEOUT_S).ping()
    except Exception:  # noqa: BLE001 - any failure means "no Docker engine here"
        return False
    return True


@dataclass(frozen=True, slots=True)
class KafkaSasl:
    """The one SASL user of a container's ``SASL_PLAINTEXT`` client listener.

    The password is drawn per object unless given, and kept out of the repr.
    """

    username: str = "eos"
    password: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)

    def client_settings(self, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """Return a client's librdkafka settings for this listener (add the address)."""
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": self.username,
            "sasl.password": self.password,
        }

    def jaas_config(self) -> str:
        """Return the broker's JAAS file: PLAIN's user list, and SCRAM (credentials in the cluster)."""
        return (
            "KafkaServer {\n"
            "  org.apache.kafka.common.security.plain.PlainLoginModule required\n"
            f'    user_{self.username}="{self.password}";\n'
            "  org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
            "};\n"
        )

    def scram_command(self) -> list[str]:
        """Return the ``kafka-configs.sh`` command creating the user's SCRAM credentials."""
        credentials = ",".join(
            f"{m}=[password={self.password}]" for m in KAFKA_SASL_MECHANISMS if m != "PLAIN"
        )
        return [
            "/opt/kafka/bin/kafka-configs.sh",
            "--bootstrap-server",
            f"localhost:{KAFKA_BROKER_PORT}",
            "--alter",
            "--add-config",
            credentials,
            "--entity-type",
            "users",
            "--entity-name",
            self.username,
        ]


def kafka_broker_env(sasl: KafkaSasl | None = None) -> dict[str, str]:
    """Environment of a single-node KRaft broker that supports transactions."""
    env = _plain_broker_env()
    if sasl is not None:
        env["KAFKA_LISTENERS"] = env["KAFKA_LISTENERS"].replace(
            "PLAINTEXT://", "SASL_PLAINTEXT://", 1
        )
        env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"] = env[
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"
        ].replace("PLAINTEXT:PLAINTEXT", "SASL_PLAINTEXT:SASL_PLAINTEXT", 1)
        env["KAFKA_SASL_ENABLED_MECHANISMS"] = ",".join(KAFKA_SASL_MECHANISMS)
        env["KAFKA_OPTS"] = f"-Djava.security.auth.login.config={KAFKA_JAAS_FILE}"
    return env


def _plain_broker_env() -> dict[str, str]:
    return {
        "CLUSTER_ID": KAFKA_CLUSTER_ID,
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": (
            f"PLAINTEXT://:{KAFKA_PORT},BROKER://:{KAFKA_BROKER_PORT},"
            f"CONTROLLER://:{KAFKA_CONTROLLER_PORT}"
        ),
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": (
            "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT"
        ),
        "KAFKA_INTER_BROKER_LISTENER_NAME": "BROKER",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@localhost:{KAFKA_CONTROLLER_PORT}",
        # One broker: every internal topic must be satisfiable with one replica.
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "1",
        "KAFKA_MIN_INSYNC_REPLICAS": "1",
        "KAFKA_DEFAULT_REPLICATION_FACTOR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        # Tests create their topics; a metadata lookup must not bring a deleted one back.
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        # Look for timed-out transactions every second (default 10 s): faster timeout tests.
        "KAFKA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "1000",
    }


def kafka_start_script(bootstrap: str, *, sasl: bool = False) -> str:
    """Start script: advertise ``bootstrap`` (host:mapped port) and run the image's broker."""
    client_listener = "SASL_PLAINTEXT" if sasl else "PLAINTEXT"
    return (
        "#!/bin/sh\n"
        f"export KAFKA_ADVERTISED_LISTENERS={client_listener}://{bootstrap},"
        f"BROKER://$(hostname):{KAFKA_BROKER_PORT}\n"
        "exec /etc/kafka/docker/run\n"
    )


class KafkaKraftContainer(DockerContainer):
    """Single-node Apache Kafka (KRaft) with transactions (see the module docstring)."""

    def __init__(
        self,
        image: str = KAFKA_IMAGE,
        *,
        docker_client_kw: dict[str, Any] | None = None,
        sasl: KafkaSasl | None = None,
    ) -> None:
        super().__init__(image, docker_client_kw=docker_client_kw)
        self.sasl = sasl
        self.with_exposed_ports(KAFKA_PORT)
        for key, value in kafka_broker_env(sasl).items():
            self.with_env(key, value)
        wait = f"while [ ! -f {KAFKA_SCRIPT_READY} ]; do sleep 0.1; done"
        self.with_command(["sh", "-c", f"{wait}; exec sh {KAFKA_START_SCRIPT}"])

    def get_bootstrap_server(self) -> str:
        """``host:port`` of the client listener as seen from this machine."""
        return f"{self.get_container_host_ip()}:{self.get_exposed_port(KAFKA_PORT)}"

    def start(self) -> KafkaKraftContainer:
        """Start, hand in the start script, wait until the broker logs that it started."""
        super().start()
        sasl = self.sasl
        script = kafka_start_script(self.get_bootstrap_server(), sasl=sasl is not None)
        self.copy_into_container(script.encode(), KAFKA_START_SCRIPT, 0o755)
        if sasl is not None:
            # Readable by the image's non-root broker user; a throwaway test password.
            self.copy_into_container(sasl.jaas_config().encode(), KAFKA_JAAS_FILE, 0o644)
        self.copy_into_container(b"", KAFKA_SCRIPT_READY, 0o644)  # only after the script
        strategy = LogMessageWaitStrategy(KAFKA_STARTED)
        strategy.with_startup_timeout(KAFKA_START_TIMEOUT_S)
        strategy.wait_until_ready(self)
        if sasl is not None:
            exit_code, output = self.exec(sasl.scram_command())
            if exit_code != 0:
                msg = f"kafka-configs.sh could not create the SCRAM credentials: {output!r}"
                raise RuntimeError(msg)
        return self


def kafka_container(
    image: str = KAFKA_IMAGE,
    *,
    docker_client_kw: dict[str, Any] | None = None,
    sasl: KafkaSasl | None = None,
) -> KafkaKraftContainer:
    """Return a not yet started single-node Kafka container (use it as a context manager).

    ``docker_client_kw`` goes to the Docker client (``{"version": "1.44"}`` builds the
    object without contacting an engine, to inspect its configuration). ``sasl`` makes
    the client listener SASL_PLAINTEXT (see the module docstring).
    """
    return KafkaKraftContainer(image, docker_client_kw=docker_client_kw, sasl=sasl)


def postgres_command(max_prepared_transactions: int) -> list[str]:
    """Server command line of the PostgreSQL container."""
    if isinstance(max_prepared_transactions, bool) or max_prepared_transactions < 0:
        msg = f"max_prepared_transactions must be an int >= 0, got {max_prepared_transactions!r}"
        raise ValueError(msg)
    return ["postgres", "-c", f"max_prepared_transactions={max_prepared_transactions}"]


def postgres_container(
    image: str = POSTGRES_IMAGE,
    *,
    max_prepared_transactions: int = POSTGRES_MAX_PREPARED_TRANSACTIONS,
    docker_client_kw: dict[str, Any] | None = None,
) -> PostgresContainer:
    """Return a not yet started PostgreSQL container with prepared transactions enabled."""
    container = PostgresContainer(image, driver=None, docker_client_kw=docker_client_kw)
    container.with_command(postgres_command(max_prepared_transactions))
    return container


def container_dsn(container: PostgresContainer) -> str:
    """Return the libpq connection string of a started PostgreSQL container."""
    host = container.get_container_host_ip()
    port = container.get_exposed_port(container.port)
    return (
        f"host={host} port={port} user={container.username} password={container.password} "
        f"dbname={container.dbname}"
    )


def wait_for_postgres(dsn: str, timeout_s: float = POSTGRES_READY_TIMEOUT_S) -> None:
    """Block until ``dsn`` accepts a connection (after a container (re)start)."""
    import psycopg

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            psycopg.connect(dsn, connect_timeout=5).close()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
        else:
            return


class ContainerPostgres:
    """A testcontainers PostgreSQL with the controls of ``connectors.testing.postgres.EmbeddedPostgres``.

    Only used where a Docker engine answers (none does on the machines this kit is built
    on, so this path is exercised only there). ``dsn`` is re-read after every (re)start,
    because Docker may map the port anew.
    """

    def __init__(self, *, max_prepared_transactions: int) -> None:
        self._container = postgres_container(max_prepared_transactions=max_prepared_transactions)
        self._started = False

    @property
    def dsn(self) -> str:
        """Connection string of the running container."""
        return container_dsn(self._container)

    def start(self) -> ContainerPostgres:
        """Start the container (or start it again after stop/kill) and wait for readiness."""
        if not self._started:
            self._container.start()
            self._started = True
        else:
            wrapped = self._container.get_wrapped_container()
            wrapped.start()
            wrapped.reload()
        wait_for_postgres(self.dsn)
        return self

    def stop(self) -> None:
        """Stop PostgreSQL cleanly (the container's SIGTERM is a smart shutdown)."""
        self._container.get_wrapped_container().stop()

    def restart(self) -> None:
        """Stop and start with the same data."""
        self.stop()
        self.start()

    def kill(self) -> None:
        """SIGKILL the container's processes; ``start()`` then runs crash recovery."""
        self._container.get_wrapped_container().kill()

    def close(self) -> None:
        """Remove the container and its data."""
        self._container.stop()

    def __enter__(self) -> ContainerPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
