"""Resume from the output: the ``startingOffsets`` of a new query.

docs/operations.md, "Changing a query". :func:`resume_offsets` settles the sink's epoch log
(an epoch in doubt is committed or aborted by its markers first) and returns the JSON for
the source's ``startingOffsets``.
"""

from __future__ import annotations

import json

from connectors.kafka._client import ClientConfig, admin_client, cluster_of, existing_topics
from connectors.stage import TransactionalSink
from connectors.stage._resume import ResumePoint, starting_offsets


def resume_offsets(
    sink: TransactionalSink,
    input_bootstrap_servers: str | None = None,
    *,
    client_config: ClientConfig = None,
) -> str:
    """Return the ``startingOffsets`` JSON that starts a new query right after the output.

    ``sink``: the sink the new query writes (built with ``resume="from-output"``).
    ``input_bootstrap_servers``: the cluster the query reads; when given, partitions added
    to the input topics since the last committed epoch are included at ``-2`` (earliest;
    Spark and kafka-rc want every partition named). ``client_config``: that cluster's
    client settings (security).

    Raises:
        txn.TxnCode.EPOCH_UNRESOLVED: the last epoch is in doubt and partly committed.
        StageCode.NOT_KAFKA_INPUT: the committed input was not only Kafka.
        StageCode.RESUME_INPUT_MISMATCH: a topic or partition of the output's input is gone.

    """
    point = sink.settle_for_resume()
    partitions = None
    if input_bootstrap_servers is not None:
        partitions = topic_partitions(input_bootstrap_servers, point, client_config)
    return json.dumps(starting_offsets(point, partitions), separators=(",", ":"))


def topic_partitions(
    bootstrap_servers: str, point: ResumePoint, client_config: ClientConfig = None
) -> dict[str, int]:
    """Return the current partition count of each topic of ``point`` (0 for a topic that is gone)."""
    topics = existing_topics(admin_client(cluster_of(bootstrap_servers, client_config)))
    return {t: topics.get(t, 0) for t in sorted(point.topics())}
