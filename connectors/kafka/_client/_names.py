"""The names a Kafka sink derives from its ``sink_id`` and the default topic names: once.

Everything the sink creates or owns on the cluster is named here, so the sink, the
checker, the CLI and the docs agree:

* write partition ``p``'s transactional id on producer lane ``k``: ``{sink_id}-{p}`` for
  the shared lane 0, ``{sink_id}-{p}.{k}`` for worker lane ``k`` in ``1 .. producer_lanes``
  (docs/kafka-sink.md, "Producer lanes");
* write partition ``p``'s marker group: ``{sink_id}.marker.{p}``;
* the Kafka epoch log's coordinator transactional id: ``{sink_id}.coordinator``;
* the epoch log's record keys start with ``{sink_id}/``.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_EPOCH_LOG_TOPIC = "eos-epoch-log"
DEFAULT_MARKER_TOPIC = "eos-markers"


def transactional_id(sink_id: str, partition: int, lane: int = 0) -> str:
    """Transactional id of write partition ``partition`` on producer lane ``lane``."""
    return f"{sink_id}-{partition}" if lane == 0 else f"{sink_id}-{partition}.{lane}"


def lane_ids(sink_id: str, partitions: Iterable[int], lanes: int) -> list[str]:
    """Every transactional id of the write partitions ``partitions``, partition by partition.

    Per partition: lane 0 (the shared lane) and the worker lanes ``1 .. lanes``
    (``producer_lanes``); this also covers the ids ``0 .. lanes-1`` of versions before the
    shared lane.
    """
    return [transactional_id(sink_id, p, k) for p in partitions for k in range(lanes + 1)]


def marker_group(sink_id: str, partition: int) -> str:
    """Consumer group whose committed offset is the marker of ``partition``."""
    return f"{sink_id}.marker.{partition}"


def coordinator_id(sink_id: str) -> str:
    """Transactional id of the coordinator that owns the sink's Kafka epoch log."""
    return f"{sink_id}.coordinator"
