"""The write tasks' Kafka producers: how they are created, fenced, and keyed in the pool."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Producer

from connectors.kafka import _client
from connectors.kafka._client import call_with_retry
from connectors.kafka._sink import _pool
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._markers import marker_consumer
from connectors.kafka._sink._writer import DeliveryErrors

# Producers fencing lanes at once (recovery fences every lane of every partition): bounds
# the threads and connections a fence-all opens.
FENCE_THREADS = 8
# Seconds for init_transactions: it may wait for an older instance's transaction to
# be aborted by the broker, which takes a few round trips on a busy machine.
INIT_TIMEOUT_S = 60.0


def new_producer(cfg: SinkConfig, transactional_id: str | None, errors: DeliveryErrors) -> Producer:
    """Return a producer with the sink's settings; only failed deliveries are reported."""
    settings: dict[str, object] = dict(cfg.producer_settings(transactional_id))
    settings["on_delivery"] = errors
    settings["delivery.report.only.error"] = True
    return _client.producer(cfg.cluster, settings)


def init_transactions(producer: Producer, transactional_id: str) -> str:
    """Fence older instances of ``transactional_id`` and abort their open transaction.

    Returns the new instance's token (what a task reports as the lane's instance).
    """
    call_with_retry(
        f"init_transactions({transactional_id})",
        lambda: producer.init_transactions(INIT_TIMEOUT_S),
    )
    return uuid.uuid4().hex[:16]


def fence(cfg: SinkConfig, transactional_ids: list[str]) -> None:
    """Fence every instance of ``transactional_ids`` (in parallel) and abort their transactions.

    Each id gets a new producer whose ``init_transactions`` bumps the id's epoch; the
    producer is dropped after (it never writes).
    """

    def one(txn_id: str) -> None:
        producer = new_producer(cfg, txn_id, DeliveryErrors())
        init_transactions(producer, txn_id)
        producer.flush(0)

    if len(transactional_ids) <= 1:
        for txn_id in transactional_ids:
            one(txn_id)
        return
    with ThreadPoolExecutor(max_workers=min(FENCE_THREADS, len(transactional_ids))) as pool:
        for future in [pool.submit(one, t) for t in transactional_ids]:
            future.result()


def lane_ids(cfg: SinkConfig, partitions: Iterable[int]) -> list[str]:
    """Every transactional id of the write partitions ``partitions`` (``_client.lane_ids``).

    Recovery fences them all, so also every id an older version used after an upgrade.
    """
    return _client.lane_ids(cfg.sink_id, partitions, cfg.producer_lanes)


def _settings_digest(cfg: SinkConfig, transactional_id: str | None) -> str:
    """Digest of every setting of a producer (the cluster's included); shows no secret."""
    cluster = cfg.cluster
    doc = [
        cluster.bootstrap_servers,
        cluster.config.items,
        sorted(cfg.producer_settings(transactional_id).items()),
    ]
    return hashlib.sha256(repr(doc).encode()).hexdigest()


def plain_pool_key(cfg: SinkConfig) -> _pool.Key:
    """Pool key of the non-transactional producer of a worker: every producer setting."""
    return ("plain", _settings_digest(cfg, None))


def pool_key(cfg: SinkConfig, partition: int, lane: int = 0) -> _pool.Key:
    """Pool key of a write task's clients: id, marker group and every producer setting."""
    txn_id = cfg.transactional_id(partition, lane)
    return (txn_id, cfg.marker_group(partition), cfg.marker_topic, _settings_digest(cfg, txn_id))


def spare_factory(cfg: SinkConfig, partition: int, lane: int) -> _pool.SpareFactory:
    """Return a factory of partition ``partition``'s spare clients (created, not initialized)."""

    def make(with_consumer: bool) -> _pool.Spare:
        errors = DeliveryErrors()
        producer = new_producer(cfg, cfg.transactional_id(partition, lane), errors)
        consumer = (
            marker_consumer(cfg.cluster, cfg.marker_group(partition)) if with_consumer else None
        )
        return _pool.Spare(producer=producer, errors=errors, consumer=consumer)

    return make


def fill_spares(pool: _pool.ClientPool, cfg: SinkConfig, parallelism: int, lanes: set[int]) -> None:
    """Have ``pool`` create in the background the spares of every partition on ``lanes``."""
    pool.fill_spares(
        {
            pool_key(cfg, p, k): spare_factory(cfg, p, k)
            for k in sorted(lanes)
            for p in range(parallelism)
        }
    )
