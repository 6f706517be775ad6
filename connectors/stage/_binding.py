"""Which streaming query writes a sink: batch ids to epochs, and a new checkpoint refused.

Spark restarts batch ids at 0 when a query gets a new checkpoint (a user deleted or moved
it). The sink's epoch log still says those epochs are committed, so without a binding
every new batch would be skipped until the ids pass the old ones: silent data loss. So the
log records which query (Spark's query id, stable across restarts from one checkpoint)
writes the sink, as a :class:`txn.QueryBinding`, and batch ``b`` is epoch ``b + offset``:

1. no query id (the sink is called outside a streaming query): the bound offset applies;
2. the first query seen binds the log (offset 0: it adopts the log's epochs), unless the
   batch id is below the last committed epoch, which only another query can produce;
3. the bound query, or the next query after an operator's reset (query id ""): its offset;
4. another query: :class:`StageCode.QUERY_MISMATCH`, unless ``start_over`` is set, which binds
   it above every epoch of the log (refused while an epoch is in doubt), or the caller
   passes ``resume`` (``resume="from-output"``, ``_resume``): it settles the log, checks
   the query's first batch and returns the offset to bind.

Where the query id comes from (:class:`QueryIdentity`): on a classic session, the local
property Spark's stream execution sets on the thread running ``foreachBatch``. Under Spark
Connect that thread is in the server's JVM, and the ``foreachBatch`` Python process sees
neither the property (the batch's jobs run on the server's gRPC threads) nor the query
(the batch's session is a clone with a query manager of its own). What it can read is the
checkpoint: Spark writes ``{"id": "<query id>"}`` to ``<checkpointLocation>/metadata``
when the query starts, before its first batch, and every restart from that checkpoint
reads the same id back. So with ``checkpoint_location`` the sink reads that file (once per
process, through the batch's session: any file system Spark reads), and checks it against
the local property where there is one. In the ``foreachBatch`` process of a Connect server
without ``checkpoint_location`` the sink refuses to write (:class:`StageCode.SPARK_CONNECT`):
unbound, a new checkpoint would silently skip batches.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from connectors.stage._errors import StageCode, StageError
from txn import EpochHistory, EpochLog, EpochState, QueryBinding, TxnCode, TxnError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_log = logging.getLogger("connectors.stage.binding")

# The local property Spark's stream execution sets on the thread running foreachBatch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
# The file of a checkpoint holding the query's id (Spark's StreamMetadata, JSON).
CHECKPOINT_METADATA = "metadata"
# The module pyspark runs a Connect server's foreachBatch functions in (as __main__).
CONNECT_FOREACH_BATCH_WORKER = "foreach_batch_worker"


def query_id_of(df: DataFrame) -> str | None:
    """Return the id of the streaming query running ``df``'s batch (None outside one).

    None under Spark Connect too: the batch's session there has no SparkContext to read the
    property from (:class:`QueryIdentity` reads the checkpoint instead).
    """
    try:
        value = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    except (AttributeError, NotImplementedError):  # Connect: PySparkAttributeError
        return None
    return str(value) if value else None


def checkpoint_query_id(df: DataFrame, location: str) -> str:
    """Return the query id recorded in checkpoint ``location`` (read through ``df``'s session).

    Raises:
        StageCode.CHECKPOINT: no readable ``metadata`` file with an ``id`` there.

    """
    path = f"{location.rstrip('/')}/{CHECKPOINT_METADATA}"
    try:
        rows = df.sparkSession.read.text(path, wholetext=True).collect()
        doc = json.loads(str(rows[0][0]).splitlines()[0]) if rows else None
    except Exception as exc:
        raise StageError(
            _no_metadata(location, f"{type(exc).__name__}: {exc}"), code=StageCode.CHECKPOINT
        ) from exc
    query_id = doc.get("id") if isinstance(doc, dict) else None
    if not isinstance(query_id, str) or not query_id:
        raise StageError(
            _no_metadata(location, f"no query id in {path}"), code=StageCode.CHECKPOINT
        )
    return query_id


def _no_metadata(location: str, why: str) -> str:
    return (
        f"checkpoint_location {location!r} holds no streaming query metadata ({why[:500]}); "
        "give the sink the query's checkpointLocation, the same string, and start the query "
        "before its first batch reaches the sink"
    )


def in_connect_foreach_batch() -> bool:
    """Whether this process is a Spark Connect server's ``foreachBatch`` worker."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = str(getattr(spec, "name", "") or getattr(main, "__file__", "") or "")
    return name.rsplit(".", 1)[-1].removesuffix(".py").endswith(CONNECT_FOREACH_BATCH_WORKER)


class QueryIdentity:
    """The id of the query writing a sink: the local property, or the checkpoint's.

    ``location``: the sink's ``checkpoint_location`` option (None: the property only).
    The checkpoint is read once per process and query; on a classic session, a query id
    that the property gives and the checkpoint does not match is a
    :class:`StageCode.CHECKPOINT` (the option names another query's checkpoint).
    """

    def __init__(self, location: str | None) -> None:
        self._location = location
        self._read: tuple[str | None, str] | None = None  # (property id, checkpoint id)

    def of(self, df: DataFrame, *, connect: bool) -> str | None:
        """Return the id of the query whose batch ``df`` is (None: not in a query)."""
        running = query_id_of(df)
        if self._location is None:
            if connect and in_connect_foreach_batch():
                msg = (
                    "under Spark Connect the sink cannot see which streaming query writes "
                    "it, so a new checkpoint would silently skip batches as already "
                    "committed; pass checkpoint_location=<the query's checkpointLocation> "
                    "to the sink"
                )
                raise StageError(msg, code=StageCode.SPARK_CONNECT)
            return running
        if self._read is None or self._read[0] != running:
            self._read = (running, checkpoint_query_id(df, self._location))
        recorded = self._read[1]
        if running is not None and running != recorded:
            msg = (
                f"checkpoint_location {self._location!r} belongs to query {recorded}, but "
                f"query {running} is writing the sink; give the sink this query's "
                "checkpointLocation"
            )
            raise StageError(msg, code=StageCode.CHECKPOINT)
        return recorded


def start_over_offset(history: EpochHistory) -> int:
    """Return the first epoch of a query that starts over: above every epoch of the log.

    An aborted last epoch (nothing of it is visible) is taken over instead: the new query's
    first batch re-plans it.
    """
    top = history.max_epoch()
    if top is None:
        return 0
    return top if history.state(top) is EpochState.ABORTED else top + 1


class QueryBinder:
    """Maps a query's batch ids to epochs of one sink's log (module docstring)."""

    def __init__(self, sink_id: str, *, start_over: bool) -> None:
        self._sink_id = sink_id
        self._start_over = start_over
        self._bound: tuple[str, int] | None = None  # (query id, offset) once checked

    def epoch(
        self,
        log: EpochLog,
        query_id: str | None,
        batch_id: int,
        resume: Callable[[], int] | None = None,
    ) -> int:
        """Return batch ``batch_id``'s epoch, binding the log on first use (module steps)."""
        if query_id is not None and self._bound is not None and self._bound[0] == query_id:
            return batch_id + self._bound[1]
        history = log.load()
        if query_id is None:
            return history.epoch_of(batch_id)
        offset = self._offset(log, history, query_id, batch_id, resume)
        self._bound = (query_id, offset)
        return batch_id + offset

    def _offset(
        self,
        log: EpochLog,
        history: EpochHistory,
        query_id: str,
        batch_id: int,
        resume: Callable[[], int] | None,
    ) -> int:
        binding = history.binding
        if binding is not None and binding.query_id == query_id:
            return binding.epoch_offset
        if binding is not None and binding.query_id == "":
            return self._bind(log, query_id, binding.epoch_offset)
        if resume is not None and history.max_epoch() is not None:
            _log.warning("sink %s resumes from its output with query %s", self._sink_id, query_id)
            return self._bind(log, query_id, resume())
        last = history.last_committed_epoch()
        if binding is None and (last is None or batch_id >= last):
            return self._bind(log, query_id, 0)
        if not self._start_over:
            raise self._mismatch(history, query_id, batch_id)
        _log.warning("sink %s starts over with query %s (start_over=True)", self._sink_id, query_id)
        return self._bind(log, query_id, start_over_offset(history))

    def _bind(self, log: EpochLog, query_id: str, offset: int) -> int:
        try:
            log.append(QueryBinding(self._sink_id, query_id, offset))
        except TxnError as exc:
            if exc.code is not TxnCode.ILLEGAL_TRANSITION:
                raise
            msg = (
                f"sink {self._sink_id!r} cannot start over with query {query_id}: {exc}. Run "
                "the previous query (its checkpoint) until that epoch has committed, or use a "
                "new sink_id"
            )
            raise StageError(msg, code=StageCode.QUERY_MISMATCH) from exc
        _log.info(
            "sink %s bound to query %s: its batch b is epoch b + %d",
            self._sink_id,
            query_id,
            offset,
        )
        return offset

    def _mismatch(self, history: EpochHistory, query_id: str, batch_id: int) -> StageError:
        binding = history.binding
        owner = binding.query_id if binding is not None else "an earlier query (unrecorded)"
        last = history.last_committed_epoch()
        msg = (
            f"sink {self._sink_id!r} belongs to query {owner} (epochs up to {last} committed), "
            f"but query {query_id} is writing batch {batch_id}: the query got a new checkpoint, "
            "so its batch ids restarted and would be skipped as already committed. To keep the "
            "old output and write this query's batches as new epochs, start over on purpose: "
            f"KafkaSink(..., start_over=True) or `eos reset {self._sink_id} --query {query_id}`; "
            "or give this query a new sink_id"
        )
        return StageError(msg, code=StageCode.QUERY_MISMATCH)
