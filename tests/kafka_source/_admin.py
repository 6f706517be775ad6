"""A scripted AdminClient double for unit tests of the source's driver side (ClusterView).

It answers Metadata and ListOffsets the way a broker that is up, down, restarting or
loading its topics does; used by test_outages.py and test_source_options.py.
"""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ClusterMetadata, TopicMetadata
from confluent_kafka.admin._listoffsets import TimestampSpec


def metadata(topics: dict[str, int], errors: dict[str, int] | None = None) -> ClusterMetadata:
    md = ClusterMetadata()
    for name, count in topics.items():
        t = TopicMetadata()
        t.topic, t.partitions = name, {p: object() for p in range(count)}
        md.topics[name] = t
    for name, code in (errors or {}).items():
        t = TopicMetadata()
        t.topic, t.error = name, KafkaError(code)
        md.topics[name] = t
    return md


class ScriptedAdmin:
    """Answers metadata from a script (the last entry repeats) and offsets from a dict.

    Latest offsets come from ``offsets``, earliest ones are 0, and a timestamp's offset is
    the first of ``records`` at or after it (-1 for none), as a broker answers ListOffsets.
    """

    def __init__(
        self,
        script: list[Any],
        offsets: dict[tuple[str, int], int],
        records: dict[tuple[str, int], list[tuple[int, int]]] | None = None,
    ) -> None:
        self.script = list(script)
        self.offsets = offsets
        self.records = records or {}  # (timestamp, offset) of each partition's records
        self.metadata_calls = 0
        self.list_offsets_calls = 0

    def list_topics(self, timeout: float) -> ClusterMetadata:
        self.metadata_calls += 1
        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(answer, KafkaError):
            raise KafkaException(answer)
        return answer

    def list_offsets(self, request: dict[Any, Any], **_: Any) -> dict[Any, Future[Any]]:
        self.list_offsets_calls += 1
        out: dict[Any, Future[Any]] = {}
        for tp, spec in request.items():
            fut: Future[Any] = Future()
            fut.set_result(SimpleNamespace(offset=self._offset(tp.topic, tp.partition, spec)))
            out[tp] = fut
        return out

    def _offset(self, topic: str, partition: int, spec: Any) -> int:
        if isinstance(spec, TimestampSpec):  # the first record at or after it, else -1
            found = [
                o for ts, o in self.records.get((topic, partition), []) if ts >= spec.timestamp
            ]
            return min(found, default=-1)
        return 0 if "Earliest" in type(spec).__name__ else self.offsets[(topic, partition)]
