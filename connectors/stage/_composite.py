"""``CompositeSink``: one epoch across several sinks (Kafka and PostgreSQL, say).

One coordinator, one epoch log, one plan: the members' write partitions are the plan's
partitions one after the other (``txn.CompositeResource``), every member's write tasks
run at the same time (one Spark job each), and aligned votes of all of them meet in one
round. Kafka-like members commit in their tasks; PostgreSQL-like members stay prepared
and are committed by the coordinator only after every Kafka partition committed the
epoch (docs/architecture.md, "Mixed epochs"). So a table written this way never shows an
epoch its topic does not fully hold, and after recovery both hold the same epochs.

Modes: aligned (the default) needs every member's tasks running at once (the sum of the
members' parallelism must fit the task slots; members without a ``parallelism`` option
share the slots, see ``_shares``); a Kafka task commits only once every task of every
member voted yes. Unaligned: Kafka tasks commit as soon as they pre-committed
(the topic may show parts of an epoch early, as in any unaligned sink), the table still
only after the whole topic side committed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from connectors.stage._connector import SinkConnector
from connectors.stage._options import StageOptions
from connectors.stage._sink import Select, TransactionalSink, _Member
from txn import EpochLog, FileEpochLog, TxnCode, TxnError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class CompositeSink(TransactionalSink):
    """Several sinks as one ``foreachBatch`` callable, committing each epoch together.

    ``sinks``: the member sinks, or ``(sink, select)`` pairs where ``select`` turns the
    micro-batch into that sink's rows: a function ``df -> DataFrame`` (e.g.
    ``lambda df: df.selectExpr("CAST(id AS STRING) AS key", "v AS value")``), or a list
    of column names, meaning ``df.select(*names)``; anything else is a ``TxnCode.CONFIG`` here,
    not at the first batch. Only the members' connectors and options are used (their own
    epoch logs are not). ``sink_id``: the composite's own
    id (its epoch log's), different from every member's. ``epoch_log``: a file path, or
    None for a log of the first member's kind (the Kafka epoch log, or the PostgreSQL
    epoch log table). ``options``: the stage options of the composite (guarantee, mode,
    stage_retries, vote_channel, start_over); every member must have the same
    guarantee; ``on_bad_record`` is each member's own (a composite refuses it). A
    member's ``parallelism`` option is its share of the plan; the members
    without one share the composite's ``parallelism`` option, else Spark's default
    parallelism capped by the task slots in aligned mode (``_shares``: defaults fit
    ``local[2]``). Without a ``mode`` option, an epoch runs unaligned when the
    application has fewer task slots than members (a one-core application). :meth:`close`
    closes the member sinks too (they hold nothing of the composite's, but may have been
    used on their own).
    """

    _member_sinks: tuple[TransactionalSink, ...] = ()  # not pickled: the receiver's are new

    def __init__(
        self,
        sinks: Sequence[TransactionalSink | tuple[TransactionalSink, Select]],
        *,
        sink_id: str,
        epoch_log: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> None:
        members = [_Member(*_split(s)) for s in sinks]
        if not members:
            msg = "CompositeSink needs at least one member sink"
            raise TxnError(msg, code=TxnCode.CONFIG)
        opts = StageOptions(**options)
        if opts.screens_records:
            msg = (
                "on_bad_record is a member sink's option in a CompositeSink (each member "
                "classifies its own rows and has its own dead-letter destination): set it on "
                "the member sinks"
            )
            raise TxnError(msg, code=TxnCode.CONFIG)
        for member in members:
            theirs = member.connector.options.guarantee
            if theirs is not opts.guarantee:
                msg = (
                    f"member sink {member.connector.sink_id!r} has guarantee {theirs.value}, "
                    f"the composite {opts.guarantee.value}; give them the same guarantee"
                )
                raise TxnError(msg, code=TxnCode.CONFIG)
            if member.connector.sink_id == sink_id:
                msg = (
                    f"the composite's sink_id {sink_id!r} is a member's; give the composite "
                    "an id of its own (it names the shared epoch log)"
                )
                raise TxnError(msg, code=TxnCode.CONFIG)
        path = None if epoch_log is None else os.fspath(epoch_log)
        first = members[0].connector
        if path is None and type(first).epoch_log_for is SinkConnector.epoch_log_for:
            first.epoch_log_for(sink_id)  # raises the TxnCode.CONFIG that says what to pass
        self._sink_id = sink_id
        self._options = opts
        self._auto_mode = "mode" not in options
        self._members = tuple(members)
        self._log_factory = _CompositeLog(first, sink_id, path)
        self._member_sinks = tuple(s[0] if isinstance(s, tuple) else s for s in sinks)
        self._init_runtime()

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_auto_mode": self._auto_mode}

    def close(self, *, wait: bool = True) -> bool:
        """Release the composite's epoch log and vote server, then close every member sink."""
        closed = super().close(wait=wait)
        if closed:
            for sink in self._member_sinks:
                sink.close(wait=wait)
        return closed


class _CompositeLog:
    """Opens the composite's epoch log (picklable, like the rest of the sink)."""

    def __init__(self, first: SinkConnector, sink_id: str, path: str | None) -> None:
        self.first, self.sink_id, self.path = first, sink_id, path

    def __call__(self) -> EpochLog:
        if self.path is not None:
            return FileEpochLog(self.path, sink_id=self.sink_id)
        return self.first.epoch_log_for(self.sink_id)


@dataclass(frozen=True)
class SelectColumns:
    """A member's ``select`` given as column names: ``df.select(*names)`` (picklable)."""

    names: tuple[str, ...]

    def __call__(self, df: DataFrame) -> DataFrame:
        return df.select(*self.names)


def _split(
    item: TransactionalSink | tuple[TransactionalSink, Select],
) -> tuple[SinkConnector, Select | None]:
    if isinstance(item, tuple) and len(item) != 2:  # a (sink, select) pair
        msg = f"a member of CompositeSink is a sink or a (sink, select) pair, got {item!r}"
        raise TxnError(msg, code=TxnCode.CONFIG)
    sink, select = item if isinstance(item, tuple) else (item, None)
    if isinstance(sink, CompositeSink) or not isinstance(sink, TransactionalSink):
        msg = f"members of CompositeSink are single sinks (KafkaSink, ...), got {sink!r}"
        raise TxnError(msg, code=TxnCode.CONFIG)
    return sink.connector, _select(sink.sink_id, select)


def _select(sink_id: str, select: object) -> Select | None:
    """Check a member's ``select``: None, a function, or a list/tuple of column names."""
    if select is None or callable(select):
        return select
    if (
        isinstance(select, (list, tuple))
        and select
        and all(isinstance(n, str) and n for n in select)
    ):
        return SelectColumns(tuple(select))
    msg = (
        f"the select of member {sink_id!r} must be a function df -> DataFrame (e.g. "
        "lambda df: df.selectExpr(...)) or a non-empty list of column names, got "
        f"{select!r}"
    )
    raise TxnError(msg, code=TxnCode.CONFIG)
