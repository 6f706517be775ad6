"""``MetricsListener``: the sinks' epoch metrics beside Spark's own query progress.

Register it with ``spark.streams.addListener(MetricsListener(sink, ...))``. For every
progress event of a query it builds one :class:`ProgressView` joining:

1. Spark's progress of the batch (input rows, durations);
2. each source's lag: the latest available offsets minus the batch's end offsets, summed
   over partitions (``source_lag``; per topic in ``topic_lag``), for sources whose offsets
   are ``{topic: {partition: offset}}`` JSON (the ``kafka-rc`` source, and Spark's own
   Kafka source); None for others. A source is named by its description
   (:func:`source_name`); a Python data source, whose description is a Java object's
   ``Class@hash``, by its class and the topics it reads;
3. the :class:`EpochMetrics` of that batch from each sink given (joined by query id and
   batch id; a sink that did not see the batch contributes nothing);
4. ``extra`` providers: name -> callable returning a JSON-ready mapping, e.g. the async
   operator's accumulator (``{"enrich": lambda: asdict(acc.value)}``).

The views are kept (the last ``RECENT_EPOCHS``) and logged as one JSON line each (logger
``connectors.stage.progress``). Spark delivers listener events asynchronously after the
batch, when the sink's metrics of it are recorded already.
"""

from __future__ import annotations

import json
import logging
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from connectors.stage._metrics import RECENT_EPOCHS, EpochMetrics

if TYPE_CHECKING:
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
        SourceProgress,
    )

    from connectors.stage._sink import TransactionalSink

log = logging.getLogger("connectors.stage.progress")

# A Java object's default toString (``package.Class@1a2b3c``): what Spark reports as the
# description of a Python data source's stream.
_OBJECT_REPR = re.compile(r"^(?:[\w$]+\.)*([\w$]+)@[0-9a-f]+$")


@dataclass(frozen=True, kw_only=True)
class ProgressView:
    """One batch of one query: Spark's progress, the sources' lag, the sinks' metrics."""

    query_id: str
    batch_id: int
    input_rows: int
    durations_ms: dict[str, int]
    source_lag: dict[str, int | None]
    sinks: dict[str, EpochMetrics] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # source -> topic -> lag: ``source_lag`` per topic (only the sources it is not None for)
    topic_lag: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> str:
        """One line of JSON."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"), default=str)


def offsets_lag(latest: str | None, end: str | None) -> int | None:
    """Sum of ``latest - end`` over the partitions of two ``{topic: {partition: offset}}`` JSONs."""
    per_topic = topic_lags(latest, end)
    return None if per_topic is None else sum(per_topic.values())


def topic_lags(latest: str | None, end: str | None) -> dict[str, int] | None:
    """``latest - end`` summed per topic over two ``{topic: {partition: offset}}`` JSONs.

    None when either is not such a JSON (a source with other offsets).
    """
    try:
        hi, lo = json.loads(latest or ""), json.loads(end or "")
        return {
            str(topic): sum(
                max(0, int(off) - int(lo.get(topic, {}).get(part, 0)))
                for part, off in parts.items()
            )
            for topic, parts in hi.items()
        }
    except (ValueError, TypeError, AttributeError):
        return None


def source_name(description: str, *offsets: str | None) -> str:
    """Name a source in a progress event: its description, unless that is a Java object repr.

    A Python data source's description is its stream object's ``Class@hash``, which changes
    with every run: it becomes ``Class[topic,...]`` from the topics of its ``offsets`` (the
    ``{topic: {partition: offset}}`` JSON of Kafka sources), or ``Class`` for other offsets.
    """
    match = _OBJECT_REPR.match(description.strip())
    if match is None:
        return description
    topics: set[str] = set()
    for raw in offsets:
        try:
            doc = json.loads(raw or "")
        except ValueError:
            continue
        if isinstance(doc, dict) and all(isinstance(v, dict) for v in doc.values()):
            topics.update(str(t) for t in doc)
    return f"{match.group(1)}[{','.join(sorted(topics))}]" if topics else match.group(1)


def _source_lags(sources: Sequence[SourceProgress]) -> dict[str, dict[str, int] | None]:
    """Each source's lag per topic (None for a source whose offsets are not Kafka's)."""
    lags: dict[str, dict[str, int] | None] = {}
    for index, s in enumerate(sources):
        name = source_name(str(s.description), s.endOffset, s.latestOffset)
        if name in lags:
            name = f"{name}#{index}"
        lags[name] = topic_lags(s.latestOffset, s.endOffset)
    return lags


class MetricsListener(StreamingQueryListener):
    """Joins query progress with sink metrics (module docstring). Thread-safe reads."""

    def __init__(
        self,
        *sinks: TransactionalSink,
        extra: Mapping[str, Callable[[], Mapping[str, Any]]] | None = None,
        keep: int = RECENT_EPOCHS,
    ) -> None:
        self._sinks = sinks
        self._extra = dict(extra or {})
        self._views: deque[ProgressView] = deque(maxlen=keep)

    def views(self) -> tuple[ProgressView, ...]:
        """Return the kept views, oldest first."""
        return tuple(self._views)

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 - Spark's listener API
        """Nothing to join at start."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802 - Spark's listener API
        """Build, keep and log the view of the batch the event reports."""
        p = event.progress
        query_id, batch_id = str(p.id), int(p.batchId)
        sinks: dict[str, EpochMetrics] = {}
        for sink in self._sinks:
            metrics = sink.metrics_for(query_id, batch_id)
            if metrics is not None:
                sinks[metrics.sink_id] = metrics
        lags = _source_lags(p.sources)
        view = ProgressView(
            query_id=query_id,
            batch_id=batch_id,
            input_rows=int(p.numInputRows),
            durations_ms={k: int(v) for k, v in dict(p.durationMs).items()},
            source_lag={k: None if v is None else sum(v.values()) for k, v in lags.items()},
            sinks=sinks,
            extra={name: dict(fn()) for name, fn in self._extra.items()},
            topic_lag={k: v for k, v in lags.items() if v is not None},
        )
        self._views.append(view)
        log.info("progress %s", view.to_json())

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802 - Spark's listener API
        """Nothing to join when idle."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802 - Spark's listener API
        """Nothing to join at the end."""
