"""What each ``eos`` command does, once, for a sink of any connector.

Every command takes the parsed arguments and the Kafka cluster (None when the command
needs none) and returns a :class:`~connectors.ops._result.Result`. Sink commands work on a
:class:`~connectors.ops._target.Target`: the epoch log, read through
:class:`~connectors.ops._target.LogRef`, and each side's state through its connector's
:class:`~connectors.ops._target.SinkAdmin`. :data:`COMMANDS` is the one dispatch.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from connectors.kafka._client import Cluster
from connectors.ops import _kafka
from connectors.ops._errors import UnknownSinkError
from connectors.ops._offsets import offsets as offsets_of
from connectors.ops._preflight import SinkPlan, preflight
from connectors.ops._result import (
    OK,
    PROBLEM,
    REFUSED,
    Result,
    history_view,
    in_doubt_problems,
)
from connectors.ops._target import LogRef, Target, sink_target
from connectors.ops._verify import verify
from connectors.stage._binding import start_over_offset
from txn import EpochHistory, QueryBinding, TxnCode, TxnError


def _per_side(target: Target, data: dict[str, Any], states: list[dict[str, Any]]) -> None:
    """Put each side's part into ``data``: a composite's under ``members``, a sink's inline."""
    if target.composite:
        data["members"] = [
            {"kind": side.admin.kind, "sink_id": side.sink_id, **state}
            for side, state in zip(target.sides, states, strict=True)
        ]
    else:
        data.update(states[0])


def status(args: argparse.Namespace, cluster: Cluster | None) -> Result:
    """``eos status``: the log's epochs, each side's markers and open work, the outputs."""
    target = sink_target(args, cluster)
    history = target.log.read_log()
    data: dict[str, Any] = {
        "sink_id": target.log.sink_id,
        "epoch_log": target.log.where,
        **history_view(history, verbose=args.verbose),
    }
    problems = in_doubt_problems(history)
    states = []
    for side in target.sides:
        state, side_problems = side.admin.state(side.sink_id, history)
        if target.composite:  # the composite's width is not the member's: found ones only
            state["markers"] = {p: m for p, m in state["markers"].items() if m is not None}
        states.append(state)
        problems += side_problems
    _per_side(target, data, states)
    if args.topic and cluster is not None:
        data["outputs"], open_problems = _kafka.output_view(cluster, args.topic, args.scan)
        problems += open_problems
    cause = "an epoch in doubt or the sink's open work (the problems above)" if problems else ""
    return Result(data=data, code=PROBLEM if problems else OK, problems=problems, cause=cause)


def _abort_history(target: Target, parallelism: int | None) -> EpochHistory:
    """Return the history ``abort-lingering`` acts on; an unknown sink needs ``--parallelism``.

    A sink gone for good may have left open transactions and no log record: with
    ``--parallelism N`` its ids ``0..N-1`` are aborted anyway, unless a side finishes its
    work as the log decided (it could not tell a decided commit from an undecided epoch).
    """
    try:
        return target.log.read_log()
    except UnknownSinkError as exc:
        if parallelism is not None and not any(s.admin.decides_by_log for s in target.sides):
            return EpochHistory(target.log.sink_id)
        msg = str(exc)
        if parallelism is None:
            msg += "; or pass --parallelism N to abort the ids 0..N-1 anyway"
        raise UnknownSinkError(msg) from None


def abort_lingering(args: argparse.Namespace, cluster: Cluster | None) -> Result:
    """``eos abort-lingering``: end every side's open work (its connector says how).

    A side that finishes its work as the log decided (PostgreSQL's prepared transactions)
    needs the log taken over first, as a restarted driver would, so that no coordinator
    logs a decision meanwhile; a log a running coordinator holds is refused.
    """
    target = sink_target(args, cluster)
    history = _abort_history(target, args.parallelism)
    takes_over = not args.dry_run and any(s.admin.decides_by_log for s in target.sides)
    log = target.log.open_log() if takes_over else None
    try:
        if log is not None:
            history = log.load()
        width = max(history.max_parallelism(), args.parallelism or 0)
        states = [
            side.admin.abort_lingering(side.sink_id, history, width, args.dry_run)
            for side in target.sides
        ]
    finally:
        if log is not None:
            log.close()
    data: dict[str, Any] = {"sink_id": target.log.sink_id, "dry_run": args.dry_run}
    _per_side(target, data, states)
    return Result(data=data)


def offsets(args: argparse.Namespace, cluster: Cluster | None) -> Result:
    """``eos offsets``: the committed input offsets and their lag (``_offsets``)."""
    target = sink_target(args, cluster)
    recorded = [
        found
        for side in target.sides
        if (found := side.admin.recorded_offsets(side.sink_id)) is not None
    ]
    return offsets_of(target.log, cluster, recorded[0] if len(recorded) == 1 else None)


def reset(args: argparse.Namespace, cluster: Cluster | None) -> Result:
    """``eos reset``: bind the sink to a new query above every epoch of its log."""
    return bind_new_query(sink_target(args, cluster).log, args.query)


def bind_new_query(ref: LogRef, query_id: str | None) -> Result:
    """Append a binding of ``ref``'s sink to ``query_id`` (None: the next query that writes).

    Refuses a sink the log does not know (nothing to reset), changes nothing when the
    sink is bound this way already, and reads the log back to confirm the new binding.
    """
    known = ref.read_log()  # read-only first: an unknown sink gets no log written
    binding = QueryBinding(ref.sink_id, query_id or "", start_over_offset(known))
    if known.binding == binding:
        return Result(
            data={
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
        except TxnError as exc:
            if exc.code is not TxnCode.ILLEGAL_TRANSITION:
                raise
            refused = "the reset was refused (the problem above)"
            return Result(
                data={"sink_id": ref.sink_id, "reset": False},
                code=REFUSED,
                problems=[str(exc)],
                cause=refused,
            )
    finally:
        log.close()
    if ref.read_log().binding != binding:
        msg = (
            f"the reset of sink {ref.sink_id!r} was appended but reading the log back does "
            "not show the new binding; run eos status before starting a query"
        )
        raise TxnError(msg, code=TxnCode.EPOCH_LOG)
    return Result(
        data={
            "sink_id": ref.sink_id,
            "reset": True,
            "binding": asdict(binding),
            "note": "the next query's batch b is written as epoch b + epoch_offset",
        }
    )


def check_cluster(args: argparse.Namespace, cluster: Cluster | None) -> Result:
    """``eos preflight``: what the cluster must offer a sink before it starts."""
    assert cluster is not None  # noqa: S101 - preflight is about a cluster: _cli requires one
    plan = SinkPlan(
        topics=args.topic,
        sink_id=args.sink_id,
        parallelism=args.parallelism,
        transaction_timeout_ms=args.transaction_timeout_ms,
        epoch_log_topic=args.epoch_log_topic,
        marker_topic=args.marker_topic,
        producer_lanes=args.producer_lanes,
        strict=args.strict,
    )
    return preflight(cluster, plan)


Command = Callable[[argparse.Namespace, "Cluster | None"], Result]
# The one dispatch: each subcommand of the parser (``_parser``) to its function.
COMMANDS: dict[str, Command] = {
    "status": status,
    "abort-lingering": abort_lingering,
    "offsets": offsets,
    "reset": reset,
    "verify": verify,  # _verify
    "preflight": check_cluster,
}
