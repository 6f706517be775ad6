"""``eos offsets SINK_ID``: the committed input offsets, as ``startingOffsets``, and the lag.

Read-only (never settles an epoch in doubt; ``connectors.kafka.resume_offsets`` does).
The committed input is the ``end`` of the last committed epoch's input offsets
(docs/architecture.md, section 11); the lag of a partition is the input topic's last
stable offset minus that, in offsets. For a PostgreSQL sink, ``in_output`` shows the
offsets its rows' own transactions recorded (``sink_input_offsets``); they must agree with
the log at its last committed epoch, else that is a problem.
"""

from __future__ import annotations

from typing import Any

from connectors.kafka._client import Cluster
from connectors.ops._result import OK, PROBLEM, Result, in_doubt_problems
from connectors.ops._target import LogRef
from connectors.stage._resume import committed_point, starting_offsets
from connectors.verify import READ_COMMITTED, end_offsets
from txn._offsets import offsets_json


def offsets(
    log: LogRef,
    cluster: Cluster | None,
    in_output: tuple[int, dict[tuple[str, int], int]] | None = None,
) -> Result:
    """Return the committed input offsets of ``log``'s sink; ``cluster``: the input's (lag).

    ``in_output``: (epoch, offsets) recorded in the output's own transactions, if any.
    """
    history = log.read_log()
    point = committed_point(history)  # StageCode.NOT_KAFKA_INPUT: nothing Kafka was recorded
    ends: dict[str, dict[int, int]] = {}
    if cluster is not None and cluster.bootstrap_servers:
        for topic in sorted(point.topics()):
            ends[topic] = end_offsets(
                cluster.bootstrap_servers, topic, READ_COMMITTED, client_config=cluster.config
            )
    counts = {t: len(e) for t, e in ends.items()} if ends else None
    rows: list[dict[str, Any]] = []
    for (topic, partition), committed in sorted(point.as_map().items()):
        end = ends.get(topic, {}).get(partition)
        rows.append(
            {
                "topic": topic,
                "partition": partition,
                "committed": committed,
                "end": end,
                "lag": None if end is None or committed < 0 else end - committed,
            }
        )
    data: dict[str, Any] = {
        "sink_id": log.sink_id,
        "epoch": point.epoch,
        "starting_offsets": starting_offsets(point, counts),
        "partitions": rows,
    }
    problems = in_doubt_problems(history)
    if in_output is not None:
        epoch, recorded = in_output
        data["in_output"] = {"epoch": epoch, "starting_offsets": offsets_json(recorded)}
        if epoch == point.epoch and recorded != point.as_map():
            problems.append(
                f"the output's own record of epoch {epoch}'s input offsets disagrees with the "
                "epoch log's"
            )
    cause = "an epoch in doubt, or the output's offsets disagree (the problems above)"
    return Result(
        data=data,
        code=PROBLEM if problems else OK,
        problems=problems,
        cause=cause if problems else "",
    )
