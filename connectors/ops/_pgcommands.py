"""``eos`` on PostgreSQL sinks and on ``CompositeSink``: status, abort-lingering, table verify.

A :class:`Target` is a sink's epoch log (of any kind: a PostgreSQL sink's table, the Kafka
log, a file) and the sinks whose markers and open work belong to it (:class:`Side`): the
sink itself, or a composite's members, each under its own id. ``reset`` needs only the
log (``_commands.reset``).

What ``abort-lingering`` does with a prepared transaction is what the sink's own recovery
does (docs/architecture.md, section 2, ``Coordinator.recover()``): COMMIT PREPARED when the
log decided commit for that epoch and the transaction is of the plan's attempt (a logged
commit decision is never followed by an abort); ROLLBACK PREPARED otherwise (undecided,
decided abort, an older attempt, a committed epoch). It first takes the log over (the
way a restarted driver would, so no coordinator can log a decision meanwhile); a log a
running coordinator holds is refused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from connectors.kafka import read_markers
from connectors.ops import _commands as cmd
from connectors.ops._errors import UsageError
from connectors.ops._postgres import PostgresRef
from connectors.verify import IdentityFn, check_table, member_history
from txn import EpochHistory, EpochState

if TYPE_CHECKING:
    from connectors.postgres import Gid
    from connectors.verify._table import OpFn

KAFKA, POSTGRES = "kafka", "postgres"
KINDS = (KAFKA, POSTGRES)


@dataclass(frozen=True)
class Side:
    """A sink whose markers and open work ``eos`` reads: ``kind`` and ``sink_id``."""

    kind: str
    sink_id: str


@dataclass(frozen=True)
class Target:
    """A sink's epoch log and its sides (one, or a composite's members).

    ``kafka``: the bootstrap address and topics for Kafka sides and Kafka logs (None: no
    Kafka involved); ``pg``: the database of PostgreSQL sides.
    """

    log: cmd.LogRef
    where: str
    sides: tuple[Side, ...]
    composite: bool
    pg: PostgresRef | None = None
    kafka: cmd.SinkRef | None = None

    def kafka_ref(self, sink_id: str) -> cmd.SinkRef:
        """Return the Kafka names of a Kafka side (the marker topic of the options)."""
        if self.kafka is None:
            msg = f"member {sink_id!r} is a Kafka sink: pass --bootstrap-servers"
            raise UsageError(msg)
        return cmd.SinkRef(
            cluster=self.kafka.cluster,
            sink_id=sink_id,
            epoch_log_topic=self.kafka.epoch_log_topic,
            marker_topic=self.kafka.marker_topic,
        )

    def postgres(self) -> PostgresRef:
        """Return the database of the PostgreSQL sides."""
        if self.pg is None:
            msg = "a PostgreSQL member needs --dsn (or $POSTGRES_DSN)"
            raise UsageError(msg)
        return self.pg


def commits(history: EpochHistory, gid: Gid) -> bool:
    """Whether the log says ``gid`` is to be committed (else it is rolled back)."""
    plan = history.plan(gid.epoch)
    return (
        plan is not None
        and plan.attempt == gid.attempt
        and history.state(gid.epoch) is EpochState.COMMIT_DECIDED
    )


def _why(history: EpochHistory, gid: Gid) -> str:
    plan, state = history.plan(gid.epoch), history.state(gid.epoch)
    if plan is None:
        return "the log holds no plan of the epoch (committed and compacted, or never planned)"
    if plan.attempt != gid.attempt:
        return f"attempt {gid.attempt} is not the plan's (attempt {plan.attempt})"
    return f"epoch {gid.epoch} is {state.value}"


def _prepared_view(history: EpochHistory, gids: list[Gid]) -> list[dict[str, Any]]:
    return [
        {
            "gid": str(g),
            "epoch": g.epoch,
            "attempt": g.attempt,
            "partition": g.partition,
            "action": "commit" if commits(history, g) else "rollback",
            "why": _why(history, g),
        }
        for g in gids
    ]


def _side_state(
    target: Target, side: Side, history: EpochHistory
) -> tuple[dict[str, Any], list[str]]:
    """Return what status shows of a side: its markers and, for PostgreSQL, prepared work."""
    width = history.max_parallelism()
    if side.kind == KAFKA:
        ref = target.kafka_ref(side.sink_id)
        markers: dict[int, Any] = read_markers(
            ref.cluster.bootstrap_servers,
            side.sink_id,
            width,
            marker_topic=ref.marker_topic,
            client_config=ref.cluster.config,
        )
        found = {str(p): asdict(m) for p, m in markers.items() if m is not None}
        return {"kind": KAFKA, "sink_id": side.sink_id, "markers": found}, []
    pg = target.postgres()
    prepared = _prepared_view(history, pg.prepared(side.sink_id))
    state = {
        "kind": POSTGRES,
        "sink_id": side.sink_id,
        "markers": {str(p): asdict(m) for p, m in pg.markers(side.sink_id).items()},
        "prepared": prepared,
    }
    problems = [
        f"prepared transaction {p['gid']} lingers ({p['why']}: the log says "
        f"{p['action']}); the sink's next start finishes it, or eos abort-lingering"
        for p in prepared
    ]
    return state, problems


def status(target: Target, topics: list[str], scan: bool) -> cmd.Result:
    """``eos status`` of a PostgreSQL sink or a composite: the log, then each side."""
    history = target.log.read_log()
    data: dict[str, Any] = {
        "sink_id": target.log.sink_id,
        "epoch_log": target.where,
        **cmd.history_view(history),
    }
    problems = cmd.in_doubt_problems(history)
    states = []
    for side in target.sides:
        state, side_problems = _side_state(target, side, history)
        states.append(state)
        problems += side_problems
    if target.composite:
        data["members"] = states
    else:
        data.update({k: v for k, v in states[0].items() if k not in ("kind", "sink_id")})
    if topics and target.kafka is not None:
        data["outputs"], open_problems = cmd.output_view(target.kafka.cluster, topics, scan)
        problems += open_problems
    return cmd.Result(data, cmd.PROBLEM if problems else cmd.OK, problems)


def abort_lingering(target: Target, dry_run: bool) -> cmd.Result:
    """``eos abort-lingering``: finish each side's prepared work as the log says.

    PostgreSQL sides: every prepared transaction of the side's id, committed or rolled
    back by :func:`commits`; Kafka sides: ``init_transactions`` on their ids
    (``_commands.abort_lingering``). Refuses a sink the log does not know (it could not
    tell a decided commit from an undecided epoch).
    """
    history = target.log.read_log()  # an unknown sink is refused before anything is opened
    log = None if dry_run else target.log.open_log()  # fences a coordinator that still runs
    try:
        if log is not None:
            history = log.load()
        data: dict[str, Any] = {"sink_id": target.log.sink_id, "dry_run": dry_run}
        members = []
        for side in target.sides:
            members.append(_abort_side(target, side, history, dry_run))
        if target.composite:
            data["members"] = members
        else:
            data.update({k: v for k, v in members[0].items() if k not in ("kind", "sink_id")})
    finally:
        if log is not None:
            log.close()
    return cmd.Result(data)


def _abort_side(target: Target, side: Side, history: EpochHistory, dry_run: bool) -> dict[str, Any]:
    width = history.max_parallelism()
    if side.kind == KAFKA:
        done = cmd.abort_lingering(target.kafka_ref(side.sink_id), width, dry_run).data
        return {"kind": KAFKA, **done}
    pg = target.postgres()
    gids = pg.prepared(side.sink_id)
    if not dry_run:
        pg.finish([(g, commits(history, g)) for g in gids])
    view = _prepared_view(history, gids)
    return {
        "kind": POSTGRES,
        "sink_id": side.sink_id,
        "prepared": view,
        "committed": [] if dry_run else [p["gid"] for p in view if p["action"] == "commit"],
        "rolled_back": [] if dry_run else [p["gid"] for p in view if p["action"] == "rollback"],
    }


@dataclass(frozen=True)
class TableCheck:
    """What ``eos verify --table`` checks: the input topic against the table a sink wrote.

    ``sink_id``: the PostgreSQL sink (a composite's member: its markers and prepared
    work); ``target.log``: its epoch log (the composite's, with ``members`` its member
    count); ``identity``: the input records' id and key, compared with the table's
    ``id_column`` and ``key_column``.
    """

    target: Target
    input_topic: str
    table: str
    schema: str
    write_mode: str
    identity: IdentityFn
    op: OpFn | None
    id_column: str
    key_column: str
    sink_id: str
    members: int | None = None


def verify_table(spec: TableCheck) -> cmd.Result:
    """``eos verify --table``: ``connectors.verify.check_table``; anomalies exit 1."""
    pg, kafka = spec.target.postgres(), spec.target.kafka
    if kafka is None:
        msg = "verify reads the input topic: pass --bootstrap-servers"
        raise UsageError(msg)
    history: Any = spec.target.log.read_log()  # an unknown sink is refused, never healthy
    if spec.members is not None:
        history = member_history(history, spec.members)
    report = check_table(
        pg.dsn,
        table=spec.table,
        sink_id=spec.sink_id,
        bootstrap=kafka.cluster.bootstrap_servers,
        input_topic=spec.input_topic,
        schema=spec.schema,
        control_schema=pg.control_schema,
        write_mode=spec.write_mode,
        key_fn=spec.identity,
        op_fn=spec.op,
        id_column=spec.id_column,
        key_column=spec.key_column,
        epoch_log=history,
        client_config=kafka.cluster.config,
    )
    anomalies = {k.value: n for k, n in report.anomaly_counts.items()}
    data = {
        "ok": report.ok,
        "table": report.table,
        "input_records": report.input_records,
        "table_rows": report.table_rows,
        "expected_rows": report.expected_rows,
        "anomalies": anomalies,
        "examples": [f"{a.kind.value}: {a.detail}" for a in report.examples],
        "prepared": list(report.prepared),
        "notes": list(report.notes),
    }
    problems = [f"{kind}: {n}" for kind, n in anomalies.items() if n]
    return cmd.Result(data, cmd.OK if report.ok else cmd.PROBLEM, problems)
