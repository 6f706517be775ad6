"""The Kafka broker of a benchmark: a given bootstrap address, else a minikafka subprocess.

``nodes`` > 1 starts a minikafka cluster set up as production clusters are (docs/deploying.md,
"Production cluster"): topics created with the broker's default get ``min(3, nodes)``
replicas and ``min.insync.replicas`` ``min(2, replicas)``, so every acks=all write (the
kit's idempotent and transactional producers) waits for that many in-sync replicas.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def broker(bootstrap: str | None, nodes: int = 1) -> Iterator[str]:
    """Yield ``bootstrap`` if given (any Kafka), else start minikafka and yield its address.

    ``nodes``: of the minikafka cluster (module docstring); ignored with ``bootstrap``.
    """
    if bootstrap:
        yield bootstrap
        return
    from minikafka import BrokerProcess

    replicas = min(3, nodes)
    settings = ["--default-replication-factor", str(replicas)]
    settings += ["--min-insync-replicas", str(min(2, replicas))]
    with BrokerProcess(nodes=nodes, extra_args=settings) as process:
        yield process.bootstrap_servers
