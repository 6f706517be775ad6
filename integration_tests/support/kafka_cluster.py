"""A Kafka cluster whose brokers a test may stop and start: a real one, or a 3-node minikafka.

Where it comes from, in this order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` with ``KAFKA_NODE_CONTROL``: the cluster behind the address.
   ``KAFKA_NODE_CONTROL`` is a command (split like a shell command line) to which the suite
   appends ``stop NODE_ID`` or ``start NODE_ID``; it must return once the broker is stopped
   (its port refuses connections) or started again, with exit status 0. It should stop the
   broker only: a cluster whose controller quorum lives on the same processes loses it when
   two of three stop, and then nothing fails over.
2. ``KAFKA_BOOTSTRAP_SERVERS`` without ``KAFKA_NODE_CONTROL``: none; the tests that need it
   skip, saying so (a real cluster that the suite cannot fail over proves nothing here).
3. Otherwise a three-node minikafka in a subprocess, stopped and started through the same
   kind of command: ``python -m minikafka control HOST:PORT`` (its control port), so the
   suite runs the very path a real cluster's command takes.

Tests see the bootstrap address and :meth:`KafkaCluster.stop` / :meth:`KafkaCluster.start`
only; they find leaders and coordinators through the Kafka protocol, never by asking the
broker behind the address.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient

from minikafka import BrokerProcess

NODE_CONTROL_ENV = "KAFKA_NODE_CONTROL"
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
# Brokers a failover test needs: replication 3 with min.insync.replicas 2 leaves one to stop.
MIN_NODES = 3
# Seconds one stop or start command may take (a real broker's controlled shutdown or start
# with log recovery can take tens of seconds).
NODE_CONTROL_TIMEOUT_S = 180.0
# Seconds to wait until Metadata lists every broker again after the test (a restarted real
# broker registers with the controller after its start-up).
REJOIN_TIMEOUT_S = 120.0
# Seconds one Metadata request may take while waiting.
METADATA_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.2


class NodeControlError(RuntimeError):
    """The node control command failed; the message has its output."""


@dataclass
class KafkaCluster:
    """A cluster of at least three brokers and the command that stops and starts one."""

    bootstrap: str
    control: tuple[str, ...]
    node_ids: tuple[int, ...]
    stopped: set[int] = field(default_factory=set)

    def stop(self, node: int) -> None:
        """Stop broker ``node`` (returns when its port refuses connections)."""
        self._run("stop", node)
        self.stopped.add(node)

    def start(self, node: int) -> None:
        """Start broker ``node`` again."""
        self._run("start", node)
        self.stopped.discard(node)

    def restore(self) -> None:
        """Start every broker this test stopped and wait until Metadata lists them all."""
        for node in sorted(self.stopped):
            self.start(node)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + REJOIN_TIMEOUT_S
        while len(admin.list_topics(timeout=METADATA_TIMEOUT_S).brokers) < len(self.node_ids):
            if time.monotonic() > deadline:
                msg = f"the cluster did not list its {len(self.node_ids)} brokers again"
                raise NodeControlError(msg)
            time.sleep(POLL_INTERVAL_S)

    def _run(self, action: str, node: int) -> None:
        command = [*self.control, action, str(node)]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=NODE_CONTROL_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            msg = f"{shlex.join(command)} exited {done.returncode}: {done.stderr or done.stdout}"
            raise NodeControlError(msg)


def _node_ids(bootstrap: str) -> tuple[int, ...]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return tuple(sorted(admin.list_topics(timeout=METADATA_TIMEOUT_S).brokers))


@contextlib.contextmanager
def kafka_cluster() -> Iterator[KafkaCluster | str]:
    """Yield the cluster (see the module docstring), or the reason there is none."""
    configured = os.environ.get(BOOTSTRAP_ENV)
    if configured:
        command = os.environ.get(NODE_CONTROL_ENV)
        if not command:
            yield (
                f"{BOOTSTRAP_ENV} names a cluster but {NODE_CONTROL_ENV} is not set: failover "
                f"tests need a command taking 'stop NODE_ID' / 'start NODE_ID' for its brokers"
            )
            return
        ids = _node_ids(configured)
        if len(ids) < MIN_NODES:
            yield f"the cluster at {configured} lists {len(ids)} broker(s); failover needs {MIN_NODES}"
            return
        yield KafkaCluster(configured, tuple(shlex.split(command)), ids)
        return
    with BrokerProcess(nodes=MIN_NODES) as broker:
        control = (sys.executable, "-m", "minikafka", "control", broker.control_address)
        yield KafkaCluster(broker.bootstrap_servers, control, _node_ids(broker.bootstrap_servers))
