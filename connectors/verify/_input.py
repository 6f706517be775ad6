"""Produce the checker's input: records with unique ids, a small key space, per-key sequences.

Record ``i`` (``0 <= i < n``) has key ``k{j}`` with ``j`` drawn from a seeded generator (so
runs are reproducible) and a JSON value ``{"id": i, "key": "k{j}", "seq": s}`` where ``s``
counts the key's earlier records. The producer is idempotent, so a retry inside the client
never duplicates input.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Message

from connectors.kafka import _client
from connectors.kafka._client import ClientConfig, admin_client, cluster_of
from connectors.verify._records import make_input_value

# Seconds to wait for every input record to be acknowledged.
PRODUCE_FLUSH_TIMEOUT_S = 120.0
# Records produced between two poll() calls that serve delivery reports.
POLL_EVERY = 10_000


def produce_input(
    bootstrap: str,
    topic: str,
    n: int,
    *,
    keys: int = 16,
    seed: int = 7,
    start: int = 0,
    on_progress: Callable[[int], None] | None = None,
    client_config: ClientConfig = None,
) -> int:
    """Produce records ``start..start+n-1`` to ``topic``; return how many were acknowledged.

    ``client_config``: the settings every client shares (security, as the sink's option).

    Raises:
        ValueError: ``n`` is negative or ``keys`` is not positive.
        KafkaException: a record could not be delivered.

    """
    if n < 0 or keys <= 0:
        msg = f"need n >= 0 and keys > 0, got n={n}, keys={keys}"
        raise ValueError(msg)
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not cryptography
    seq = dict.fromkeys(range(keys), 0)
    # replay the generator up to ``start`` so sequences continue across calls
    for _ in range(start):
        seq[rng.randrange(keys)] += 1
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err)

    cluster = cluster_of(bootstrap, client_config)
    admin_client(cluster)  # first contact: a wrong address or credentials fail fast, typed
    producer = _client.producer(
        cluster,
        {
            "enable.idempotence": True,
            "linger.ms": 20,
        },
    )
    for i in range(start, start + n):
        j = rng.randrange(keys)
        key = f"k{j}"
        producer.produce(
            topic, key=key.encode(), value=make_input_value(i, key, seq[j]), on_delivery=delivered
        )
        seq[j] += 1
        if (i - start) % POLL_EVERY == POLL_EVERY - 1:
            producer.poll(0)
            if on_progress is not None:
                on_progress(i - start + 1)
    remaining = producer.flush(PRODUCE_FLUSH_TIMEOUT_S)
    if errors:
        raise KafkaException(errors[0])
    if remaining:
        msg = f"{remaining} input records not acknowledged in {PRODUCE_FLUSH_TIMEOUT_S}s"
        raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, msg))  # noqa: SLF001
    if on_progress is not None:
        on_progress(n)
    return n
