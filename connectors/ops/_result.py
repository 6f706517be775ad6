"""What every ``eos`` command returns: a JSON-ready result, its exit code, shared views."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from connectors.kafka import _client
from txn import EpochHistory

OK, PROBLEM, USAGE, UNAVAILABLE, REFUSED = 0, 1, 2, 3, 4
EXIT_CODES = {
    OK: "done; the sink's log was read and is healthy / no anomaly",
    PROBLEM: "a check found a problem (anomalies, an epoch in doubt, a failed preflight)",
    USAGE: "bad arguments (or records that do not fit the verify identity options, or "
    "client settings the cluster refused: authentication failed)",
    UNAVAILABLE: "the cluster or the epoch log could not be read, or the log holds no "
    "record of the sink id (unknown sink)",
    REFUSED: "the command was refused (a reset with an epoch in doubt; a log a running "
    "coordinator holds; a PostgreSQL connection string given as --epoch-log)",
}


@dataclass(kw_only=True)
class Result:
    """A command's outcome: what to show, and the exit code.

    ``cause``: why the command exits ``code``, for the footer (default: the code's
    :data:`EXIT_CODES` text, which lists every cause of that code).
    """

    data: dict[str, Any]
    code: int = OK
    problems: list[str] = field(default_factory=list)
    cause: str = ""

    def reason(self) -> str:
        """Return why the command exits ``code``: ``cause``, else the code's text."""
        return self.cause or EXIT_CODES[self.code]

    def footer(self) -> str:
        """Return the last line ``eos`` prints: the exit code and its cause."""
        return f"exit code {self.code}: {self.reason()}"


def failed(exc: Exception, code: int, cause: str, hint: str = "") -> Result:
    """Return the result of a command that raised ``exc``: exit ``code`` for ``cause``.

    A Kafka setting a library's message quotes is scrubbed here; a DSN's password by the
    CLI, for every result.
    """
    text = _client.scrub(str(exc)) + hint
    return Result(
        data={"error": f"{type(exc).__name__}: {text}"}, code=code, problems=[text], cause=cause
    )


def checked(ok: bool, anomaly_counts: Mapping[Any, int], data: dict[str, Any]) -> Result:
    """Return the result of a checker's report (``eos verify``): its anomalies exit 1."""
    anomalies = {kind.value: n for kind, n in anomaly_counts.items()}
    problems = [f"{kind}: {n}" for kind, n in anomalies.items() if n]
    cause = "no anomaly" if ok else "the check found anomalies (the problems above)"
    return Result(
        data={"ok": ok, **data, "anomalies": anomalies},
        code=OK if ok else PROBLEM,
        problems=problems,
        cause=cause,
    )


def history_view(history: EpochHistory, *, verbose: bool = False) -> dict[str, Any]:
    """Return a sink's epochs as ``status`` shows them (any log kind).

    ``verbose``: each epoch with its plan's parallelism, attempt, mode and guarantee.
    """
    return {
        "last_committed_epoch": history.last_committed_epoch(),
        "epochs": [_epoch_view(history, e, verbose) for e in history.epochs()],
        "in_doubt": [
            asdict(p) | {"guarantee": p.guarantee.value, "mode": p.mode.value}
            for p in history.in_doubt()
        ],
        "binding": None if history.binding is None else asdict(history.binding),
    }


def _epoch_view(history: EpochHistory, epoch: int, verbose: bool) -> dict[str, Any]:
    view: dict[str, Any] = {"epoch": epoch, "state": history.state(epoch).value}
    plan = history.plan(epoch)
    if verbose and plan is not None:
        view |= {
            "parallelism": plan.parallelism,
            "attempt": plan.attempt,
            "mode": plan.mode.value,
            "guarantee": plan.guarantee.value,
        }
    return view


def in_doubt_problems(history: EpochHistory) -> list[str]:
    """One problem per epoch in doubt."""
    return [
        f"epoch {p.epoch} is in doubt (attempt {p.attempt}, parallelism "
        f"{p.parallelism}); run the query from its checkpoint to finish it"
        for p in history.in_doubt()
    ]
