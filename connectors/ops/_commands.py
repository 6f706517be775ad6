"""What each ``eos`` command does; each returns a JSON-ready result and an exit code."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from connectors.kafka import (
    DEFAULT_EPOCH_LOG_TOPIC,
    DEFAULT_MARKER_TOPIC,
    KafkaEpochLog,
    KafkaSink,
    _names,
    read_markers,
)
from connectors.kafka._admin import admin_client, existing_topics
from connectors.kafka._clients import Cluster
from connectors.kafka._sink._config import DEFAULT_PRODUCER_LANES
from connectors.kafka._sink._resource import KafkaResource
from connectors.kafka._sink._writer import RecordLayout
from connectors.ops._errors import UnknownSinkError, UnreadableLogError
from connectors.stage import start_over_offset
from connectors.verify import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    HistoryLike,
    IdentityFn,
    check_exactly_once,
    end_offsets,
    member_history,
    scan_topic,
)
from txn import (
    EpochHistory,
    EpochLog,
    EpochLogError,
    FileEpochLog,
    IllegalTransitionError,
    QueryBinding,
    deferred_completion,
)

OK, PROBLEM, USAGE, UNAVAILABLE, REFUSED = 0, 1, 2, 3, 4
# An --epoch-log value that is a libpq connection string (URI or key=value form), not a path.
_DSN = re.compile(r"^postgres(ql)?://|(^|\s)(host|dbname|user|port)\s*=")


@dataclass(frozen=True)
class SinkRef:
    """Where a sink's state lives (the options of every sink command).

    ``cluster``: the address and the client settings (``--command-config``) every Kafka
    client of the command uses.
    """

    cluster: Cluster
    sink_id: str
    epoch_log: str | None = None  # a file path; None: the Kafka epoch log
    epoch_log_topic: str = DEFAULT_EPOCH_LOG_TOPIC
    marker_topic: str = DEFAULT_MARKER_TOPIC

    def read_log(self) -> EpochHistory:
        """Read the sink's history without taking the log over from a running sink.

        The last epoch's completion that the sink defers (docs/architecture.md, "Deferred
        completion") is folded in when every write partition's marker shows the epoch.

        Raises:
            UnreadableLogError: ``epoch_log`` is a PostgreSQL connection string (``--dsn``'s).
            UnknownSinkError: the log holds no record of the sink (nothing to report on).

        """
        self._check_kind()
        if self.epoch_log is not None:
            if not Path(self.epoch_log).exists():
                raise UnknownSinkError(
                    self._unknown(f"there is no epoch log file at {self.epoch_log}")
                )
            history = FileEpochLog(self.epoch_log, sink_id=self.sink_id, read_only=True).load()
        else:
            if self.epoch_log_topic not in existing_topics(admin_client(self.cluster)):
                raise UnknownSinkError(
                    self._unknown(
                        f"the Kafka epoch log topic {self.epoch_log_topic!r} does not exist at "
                        f"{self.cluster.bootstrap_servers}"
                    )
                )
            history = self._kafka_log().load()
        if not history.records and history.committed_through is None:
            where = (
                f"epoch log file {self.epoch_log}"
                if self.epoch_log is not None
                else f"Kafka epoch log topic {self.epoch_log_topic!r} at "
                f"{self.cluster.bootstrap_servers}"
            )
            raise UnknownSinkError(self._unknown(f"the {where} holds no record of it"))
        return self.settled(history)

    def settled(self, history: EpochHistory) -> EpochHistory:
        """Return ``history`` with the deferred completion its markers show folded in."""
        if not history.in_doubt():
            return history
        markers = read_markers(
            self.cluster.bootstrap_servers,
            self.sink_id,
            history.max_parallelism(),
            marker_topic=self.marker_topic,
            client_config=self.cluster.config,
        )
        completion = deferred_completion(history, markers)
        return history if completion is None else history.with_record(completion)

    def open_log(self) -> EpochLog:
        """Open the sink's log for appending (fences a coordinator that still runs)."""
        self._check_kind()
        if self.epoch_log is not None:
            return FileEpochLog(self.epoch_log, sink_id=self.sink_id)
        return self._kafka_log()

    def _kafka_log(self) -> KafkaEpochLog:
        return KafkaEpochLog(
            self.cluster.bootstrap_servers,
            self.sink_id,
            topic=self.epoch_log_topic,
            create_topic=False,
            client_config=self.cluster.config,
        )

    def _check_kind(self) -> None:
        if self.epoch_log is not None and _DSN.search(self.epoch_log):
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


@dataclass
class Result:
    """A command's outcome: what to show, and the exit code."""

    data: dict[str, Any]
    code: int = OK
    problems: list[str] = field(default_factory=list)


def status(ref: SinkRef, topics: list[str], scan: bool) -> Result:
    """``eos status``: epochs, binding, markers, and the output partitions' LSO lag."""
    history = ref.read_log()
    width = history.max_parallelism()
    markers = read_markers(
        ref.cluster.bootstrap_servers,
        ref.sink_id,
        width,
        marker_topic=ref.marker_topic,
        client_config=ref.cluster.config,
    )
    outputs, open_problems = output_view(ref.cluster, topics, scan)
    data: dict[str, Any] = {
        "sink_id": ref.sink_id,
        **history_view(history),
        "markers": {str(p): None if m is None else asdict(m) for p, m in markers.items()},
        "outputs": outputs,
    }
    problems = in_doubt_problems(history) + open_problems
    return Result(data, PROBLEM if problems else OK, problems)


def history_view(history: EpochHistory) -> dict[str, Any]:
    """Return the epochs of a sink's log as ``status`` shows them (any log kind)."""
    return {
        "last_committed_epoch": history.last_committed_epoch(),
        "epochs": [{"epoch": e, "state": history.state(e).value} for e in history.epochs()],
        "in_doubt": [
            asdict(p) | {"guarantee": p.guarantee.value, "mode": p.mode.value}
            for p in history.in_doubt()
        ],
        "binding": None if history.binding is None else asdict(history.binding),
    }


def in_doubt_problems(history: EpochHistory) -> list[str]:
    """One problem per epoch in doubt."""
    return [
        f"epoch {p.epoch} is in doubt (attempt {p.attempt}, parallelism "
        f"{p.parallelism}); run the query from its checkpoint to finish it"
        for p in history.in_doubt()
    ]


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


def abort_lingering(
    ref: SinkRef, parallelism: int | None, dry_run: bool, lanes: int = DEFAULT_PRODUCER_LANES
) -> Result:
    """``eos abort-lingering``: ``init_transactions`` on every id the sink ever used.

    Every producer lane ``0 .. lanes`` of every partition (the shared lane 0 and the worker
    lanes of the sink's ``producer_lanes``; pass the largest it ever ran with: this also
    covers the ids ``0 .. lanes-1`` of versions before the shared lane). A sink with no
    epoch log records is refused unless ``parallelism`` says which ids to abort (a sink
    that is gone for good).
    """
    try:
        width = max(ref.read_log().max_parallelism(), parallelism or 0)
    except UnknownSinkError as exc:
        if parallelism is None:
            msg = f"{exc}; or pass --parallelism N to abort the ids 0..N-1 anyway"
            raise UnknownSinkError(msg) from None
        width = parallelism
    ids = _names.lane_ids(ref.sink_id, range(width), lanes)
    if not dry_run and width:
        sink = KafkaSink(
            ref.cluster.bootstrap_servers,
            None,
            ref.sink_id,
            marker_topic=ref.marker_topic,
            client_config=ref.cluster.config,
            producer_lanes=lanes,
        )
        KafkaResource(sink.config, RecordLayout()).abort_lingering(range(width))
    return Result(
        {
            "sink_id": ref.sink_id,
            "transactional_ids": ids,
            "dry_run": dry_run,
            "aborted": not dry_run and bool(ids),
        }
    )


@dataclass(frozen=True)
class VerifySpec:
    """What ``eos verify`` checks: the topics, the records' identity, optionally the log.

    ``log``: the sink's epoch log (the composite's, for a member of ``CompositeSink``)
    and marker topic; None checks the topics only. ``sink_id``: whose markers to read;
    ``members``: the composite's member count (None: a single sink).
    """

    cluster: Cluster
    input_topic: str
    output_topic: str
    identity: IdentityFn
    log: SinkRef | None = None
    sink_id: str | None = None
    members: int | None = None


def verify(spec: VerifySpec) -> Result:
    """``eos verify``: the exactly-once checker; anomalies make the exit code 1."""
    history: HistoryLike | None = None
    if spec.log is not None:
        history = spec.log.read_log()  # an unknown sink or an unreadable log is refused
        if spec.members is not None:
            history = member_history(history, spec.members)
    report = check_exactly_once(
        spec.cluster.bootstrap_servers,
        input_topic=spec.input_topic,
        output_topic=spec.output_topic,
        sink_id=spec.sink_id or "",
        key_fn=spec.identity,
        epoch_log=history,
        marker_topic=DEFAULT_MARKER_TOPIC if spec.log is None else spec.log.marker_topic,
        verify_epoch_log=history is not None,
        client_config=spec.cluster.config,
    )
    anomalies = {k.value: n for k, n in report.anomaly_counts.items()}
    data = {
        "ok": report.ok,
        "input_records": report.input_records,
        "committed_records": report.committed_records,
        "anomalies": anomalies,
        "notes": list(report.notes),
    }
    problems = [f"{kind}: {n}" for kind, n in anomalies.items() if n]
    return Result(data, OK if report.ok else PROBLEM, problems)


class LogRef(Protocol):
    """A sink's epoch log of any kind (:class:`SinkRef`, ``_postgres.PostgresRef``)."""

    @property
    def sink_id(self) -> str: ...

    def read_log(self) -> EpochHistory: ...

    def open_log(self) -> EpochLog: ...


def reset(ref: LogRef, query_id: str | None) -> Result:
    """``eos reset``: bind the sink to a new query above every epoch of its log.

    Refuses a sink the log does not know (nothing to reset), changes nothing when the
    sink is bound this way already, and reads the log back to confirm the new binding.
    """
    known = ref.read_log()  # read-only first: an unknown sink gets no log written
    binding = QueryBinding(ref.sink_id, query_id or "", start_over_offset(known))
    if known.binding == binding:
        return Result(
            {
                "sink_id": ref.sink_id,
                "reset": False,
                "binding": asdict(binding),
                "note": "the sink is bound this way already; nothing changed",
            }
        )
    log = ref.open_log()
    try:
        history = log.load()
        # A completion the sink deferred (settled by its markers in ``known``) goes first.
        settled = [
            c
            for p in history.in_doubt()
            if known.is_committed(p.epoch) and (c := known.completion(p.epoch)) is not None
        ]
        for completion in settled:
            history = history.with_record(completion)
        binding = QueryBinding(ref.sink_id, query_id or "", start_over_offset(history))
        try:
            log.append_all([*settled, binding])
        except IllegalTransitionError as exc:
            return Result({"sink_id": ref.sink_id, "reset": False}, REFUSED, [str(exc)])
    finally:
        log.close()
    if ref.read_log().binding != binding:
        msg = (
            f"the reset of sink {ref.sink_id!r} was appended but reading the log back does "
            "not show the new binding; run eos status before starting a query"
        )
        raise EpochLogError(msg)
    return Result(
        {
            "sink_id": ref.sink_id,
            "reset": True,
            "binding": asdict(binding),
            "note": "the next query's batch b is written as epoch b + epoch_offset",
        }
    )
