"""``eos`` on Kafka sinks: their epoch log, markers, transactional ids and output topics.

:class:`KafkaAdmin` is the connector's admin interface (``_target.SinkAdmin``) over one
cluster and the sink's topic options; :class:`KafkaLog` a Kafka sink's epoch log (the
Kafka epoch log topic, or a ``FileEpochLog`` file). Every client takes the command's
cluster settings (``--command-config``, ``EOS_KAFKA_*``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from connectors.kafka import (
    DEFAULT_EPOCH_LOG_TOPIC,
    DEFAULT_MARKER_TOPIC,
    KafkaEpochLog,
    KafkaSink,
    read_markers,
)
from connectors.kafka._client import Cluster, admin_client, existing_topics, lane_ids
from connectors.kafka._sink._config import DEFAULT_PRODUCER_LANES
from connectors.kafka._sink._resource import KafkaResource
from connectors.kafka._sink._writer import RecordLayout
from connectors.ops._errors import UnknownSinkError, UnreadableLogError
from connectors.ops._result import Result, checked
from connectors.verify import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    HistoryLike,
    IdentityFn,
    Record,
    check_exactly_once,
    end_offsets,
    scan_topic,
)
from txn import EpochHistory, EpochLog, FileEpochLog, Marker
from txn._settle import deferred_completion

# An --epoch-log value that is a libpq connection string (URI or key=value form), not a path.
_DSN = re.compile(r"^postgres(ql)?://|(^|\s)(host|dbname|user|port)\s*=")


@dataclass(frozen=True, kw_only=True)
class KafkaAdmin:
    """The Kafka connector's admin interface: sinks' state on one cluster.

    ``marker_topic`` and ``epoch_log_topic``: the sink's options of those names; ``lanes``:
    the largest ``producer_lanes`` a sink ran with (its transactional ids per partition).
    """

    cluster: Cluster
    marker_topic: str = DEFAULT_MARKER_TOPIC
    epoch_log_topic: str = DEFAULT_EPOCH_LOG_TOPIC
    lanes: int = DEFAULT_PRODUCER_LANES
    kind = "kafka"
    # Open transactions are aborted whatever the log says (init_transactions fences them).
    decides_by_log = False

    def markers(self, sink_id: str, width: int) -> dict[int, Marker | None]:
        """Return the committed marker of each write partition ``0 .. width-1`` (or None)."""
        return read_markers(
            self.cluster.bootstrap_servers,
            sink_id,
            width,
            marker_topic=self.marker_topic,
            client_config=self.cluster.config,
        )

    def state(self, sink_id: str, history: EpochHistory) -> tuple[dict[str, Any], list[str]]:
        """``status`` of the sink: the marker of every write partition the log has used."""
        markers = self.markers(sink_id, history.max_parallelism())
        return {
            "markers": {str(p): None if m is None else asdict(m) for p, m in markers.items()}
        }, []

    def abort_lingering(
        self, sink_id: str, history: EpochHistory, width: int, dry_run: bool
    ) -> dict[str, Any]:
        """``init_transactions`` on every transactional id of partitions ``0 .. width-1``.

        Every producer lane ``0 .. lanes`` of every partition (the shared lane 0 and the
        worker lanes; this also covers the ids ``0 .. lanes-1`` of versions before the
        shared lane).
        """
        del history  # an open transaction is aborted whatever its epoch
        ids = lane_ids(sink_id, range(width), self.lanes)
        if not dry_run and width:
            sink = KafkaSink(
                self.cluster.bootstrap_servers,
                None,
                sink_id,
                marker_topic=self.marker_topic,
                client_config=self.cluster.config,
                producer_lanes=self.lanes,
            )
            KafkaResource(cfg=sink.config, layout=RecordLayout()).abort_lingering(range(width))
        return {"transactional_ids": ids, "aborted": not dry_run and bool(ids)}

    def recorded_offsets(self, sink_id: str) -> None:
        """Return None: a Kafka sink records its input offsets in the epoch log only."""
        del sink_id


@dataclass(frozen=True)
class KafkaLog:
    """A Kafka sink's epoch log: the Kafka epoch log topic, or the file at ``path``.

    Read, it is settled by the sink's markers: the last epoch's completion that the sink
    defers (docs/architecture.md, "Deferred completion") is folded in when every write
    partition's marker shows the epoch.
    """

    admin: KafkaAdmin
    sink_id: str
    path: str | None = None  # a FileEpochLog; None: the Kafka epoch log topic

    @property
    def where(self) -> str:
        """The epoch log's place, for messages and output."""
        if self.path is not None:
            return f"epoch log file {self.path}"
        return (
            f"Kafka epoch log topic {self.admin.epoch_log_topic!r} at "
            f"{self.admin.cluster.bootstrap_servers}"
        )

    def read_log(self) -> EpochHistory:
        """Read the sink's history without taking the log over from a running sink.

        Raises:
            UnreadableLogError: ``path`` is a PostgreSQL connection string (``--dsn``'s).
            UnknownSinkError: the log holds no record of the sink (nothing to report on).

        """
        self._check_kind()
        if self.path is not None:
            if not Path(self.path).exists():
                raise UnknownSinkError(self._unknown(f"there is no epoch log file at {self.path}"))
            history = FileEpochLog(self.path, sink_id=self.sink_id, read_only=True).load()
        else:
            if self.admin.epoch_log_topic not in existing_topics(admin_client(self.admin.cluster)):
                raise UnknownSinkError(self._unknown(f"the {self.where} does not exist"))
            history = self._kafka_log().load()
        if not history.records and history.committed_through is None:
            raise UnknownSinkError(self._unknown(f"the {self.where} holds no record of it"))
        if not history.in_doubt():
            return history
        markers = self.admin.markers(self.sink_id, history.max_parallelism())
        completion = deferred_completion(history, markers)
        return history if completion is None else history.with_record(completion)

    def open_log(self) -> EpochLog:
        """Open the sink's log for appending (fences a coordinator that still runs)."""
        self._check_kind()
        if self.path is not None:
            return FileEpochLog(self.path, sink_id=self.sink_id)
        return self._kafka_log()

    def _kafka_log(self) -> KafkaEpochLog:
        return KafkaEpochLog(
            self.admin.cluster.bootstrap_servers,
            self.sink_id,
            topic=self.admin.epoch_log_topic,
            create_topic=False,
            client_config=self.admin.cluster.config,
        )

    def _check_kind(self) -> None:
        if self.path is not None and _DSN.search(self.path):
            msg = (  # the value itself is not repeated: a DSN may carry a password
                f"--epoch-log of sink {self.sink_id!r} is a PostgreSQL connection string, "
                "but --epoch-log reads a FileEpochLog file; pass the connection string as "
                "--dsn to read the sink's epoch log table"
            )
            raise UnreadableLogError(msg)

    def _unknown(self, why: str) -> str:
        return (
            f"sink {self.sink_id!r} is unknown here: {why}. Check the sink id; a sink whose "
            "log lives elsewhere needs --epoch-log PATH (a FileEpochLog) or --epoch-log-topic "
            "TOPIC; a PostgreSQL sink keeps its log in its database: pass --dsn DSN"
        )


def output_view(
    cluster: Cluster, topics: list[str], scan: bool
) -> tuple[list[dict[str, Any]], list[str]]:
    """Return each output topic's partitions as ``status`` shows them, and their problems."""
    outputs = [_output(cluster, t, scan) for t in topics]
    problems = [
        f"{o['topic']}[{p['partition']}]: {p['lso_lag']} offsets behind the high "
        "watermark (an open transaction)"
        for o in outputs
        for p in o["partitions"]
        if p["lso_lag"]
    ]
    return outputs, problems


def _output(cluster: Cluster, topic: str, scan: bool) -> dict[str, Any]:
    where, shared = cluster.bootstrap_servers, cluster.config
    lso = end_offsets(where, topic, READ_COMMITTED, client_config=shared)
    hw = end_offsets(where, topic, READ_UNCOMMITTED, client_config=shared)
    scans = scan_topic(where, topic, client_config=shared) if scan else {}
    partitions = []
    for p in sorted(hw):
        row: dict[str, Any] = {
            "partition": p,
            "high_watermark": hw[p],
            "last_stable_offset": lso[p],
            "lso_lag": hw[p] - lso[p],
        }
        if scan:
            row["open_transactions"] = [
                {
                    "producer_id": s.producer_id,
                    "producer_epoch": s.producer_epoch,
                    "first_offset": s.first,
                }
                for s in scans[p].open
            ]
        partitions.append(row)
    return {"topic": topic, "partitions": partitions}


@dataclass(frozen=True, kw_only=True)
class TopicCheck:
    """What ``eos verify --output-topic`` checks: the topics, the records' identity, the log.

    ``history``: the sink's epoch log (the composite's, cut to the member); None checks
    the topics only. ``sink_id``: whose markers to read, in ``marker_topic``.
    """

    cluster: Cluster
    inputs: Sequence[Record]
    output_topic: str
    identity: IdentityFn
    history: HistoryLike | None = None
    sink_id: str | None = None
    marker_topic: str = DEFAULT_MARKER_TOPIC
    dead_letter_topic: str | None = None


def verify_topic(spec: TopicCheck) -> Result:
    """``eos verify --output-topic``: the exactly-once checker; anomalies exit 1."""
    report = check_exactly_once(
        spec.cluster.bootstrap_servers,
        inputs=spec.inputs,
        output_topic=spec.output_topic,
        dead_letter_topic=spec.dead_letter_topic,
        sink_id=spec.sink_id or "",
        key_fn=spec.identity,
        epoch_log=spec.history,
        marker_topic=spec.marker_topic,
        verify_epoch_log=spec.history is not None,
        client_config=spec.cluster.config,
    )
    data = {
        "input_records": report.input_records,
        "committed_records": report.committed_records,
        "dead_letter_records": report.dead_letter_records,
        "notes": list(report.notes),
    }
    return checked(report.ok, report.anomaly_counts, data)
