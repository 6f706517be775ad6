"""AsyncOperator: runs an async user function over Arrow batches of one partition."""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from connectors.async_io._config import AsyncConfig, OnTimeout
from connectors.async_io._errors import AsyncCode, AsyncIOError, row_error
from connectors.async_io._function import (
    AsyncFunction,
    Enrichment,
    UserFailure,
    call_with_retries,
    check_async_callable,
    validate_result,
)
from connectors.async_io._health import WARNINGS, BatchHealth
from connectors.async_io._metrics import AsyncMetrics, MetricsRecorder
from connectors.async_io._queues import OrderedResultQueue, ResultQueue, UnorderedResultQueue
from txn import TxnCode


@dataclass(eq=False, kw_only=True)
class _Entry:
    """One request: rows ``[first, first + len(rows))`` of the current input batch."""

    first: int
    rows: list[dict[str, Any]]
    values: list[Enrichment] = field(default_factory=list)
    dropped: bool = False
    timed_out: bool = False
    retried: bool = False  # at least one attempt failed and was retried


@dataclass(eq=False, kw_only=True)
class _BatchState:
    """Bookkeeping of the requests of one input batch."""

    queue: ResultQueue[_Entry]
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    failures: list[BaseException] = field(default_factory=list)
    leaving: list[_Entry] = field(default_factory=list)


class AsyncOperator:
    """Enrich Arrow batches by calling an async function, many requests at once.

    Protocol of ``run`` (one call per partition):
        1. Create a private event loop and ``await fn.open()`` (AsyncFunction only).
        2. For each input batch, in order:
           a. split it into requests (one row, or ``batch_size`` rows);
           b. start requests in input order while fewer than ``capacity`` are in flight;
              otherwise wait for one to finish (back-pressure: nothing is read ahead);
           c. each request runs ``fn`` with retries under one overall timeout;
           d. finished requests leave through the result queue: ordered (input order)
              or unordered (completion order);
           e. when every request of the batch has left (the fence), emit one output
              batch: the kept input rows in leaving order plus the enrichment columns.
        3. ``await fn.close()`` and close the loop, also on failure or early exit.

    Guarantees: at most ``capacity`` calls of ``fn`` are in flight; no result crosses
    the end of its input batch; a failure cancels the batch's other requests and raises
    an :class:`AsyncIOError` naming ``(partition, row_index)``. Not guaranteed: that ``fn``
    is called once per row (retries and Spark task retries call it again).

    ``run`` drives its own event loop, so call it from synchronous code (not from inside
    a running event loop). Metrics accumulate over runs and are readable at any time.
    """

    def __init__(
        self,
        fn: Any,
        enrichment_schema: pa.Schema,
        config: AsyncConfig | None = None,
        *,
        partition: int = 0,
    ) -> None:
        self._fn = check_async_callable(fn)
        self._config = config if config is not None else AsyncConfig()
        if not isinstance(self._config, AsyncConfig):
            msg = f"config must be an AsyncConfig, got {type(self._config).__name__}"
            raise AsyncIOError(msg, code=TxnCode.CONFIG)
        self._schema = check_enrichment_schema(enrichment_schema)
        self._names = frozenset(self._schema.names)
        self._default = self._check_default(self._config.timeout_default)
        self._partition = partition
        self._rows_seen = 0
        self._recorder = MetricsRecorder()

    @property
    def metrics(self) -> AsyncMetrics:
        """Counters so far (updated after each output batch and at the end)."""
        return self._recorder.snapshot()

    def run(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield one enriched output batch per input batch (see the class protocol)."""
        loop = asyncio.new_event_loop()
        opened = False
        try:
            if isinstance(self._fn, AsyncFunction):
                loop.run_until_complete(self._fn.open())
            opened = True
            for batch in batches:
                out = loop.run_until_complete(self._process(batch))
                self._rows_seen += batch.num_rows
                yield out
        finally:
            try:
                if opened and isinstance(self._fn, AsyncFunction):
                    loop.run_until_complete(self._fn.close())
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    def _check_default(self, default: Mapping[str, Any] | None) -> Enrichment:
        if default is not None:
            unknown = sorted(set(default) - self._names)
            if unknown:
                msg = f"timeout_default has columns {unknown} not in the enrichment schema"
                raise AsyncIOError(msg, code=TxnCode.CONFIG)
        return default

    async def _process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        clash = sorted(self._names & set(batch.schema.names))
        if clash:
            msg = f"enrichment columns {clash} already exist in the input; rename them"
            raise AsyncIOError(msg, code=TxnCode.CONFIG)
        self._recorder.rows_in += batch.num_rows
        queue: ResultQueue[_Entry] = (
            OrderedResultQueue() if self._config.ordered else UnorderedResultQueue()
        )
        state = _BatchState(queue=queue)
        try:
            for entry in self._split(batch.to_pylist()):
                while len(state.tasks) >= self._config.capacity:
                    await self._collect(state)
                self._start(entry, state)
            while len(state.queue):
                await self._collect(state)
        except BaseException:
            for task in state.tasks:
                task.cancel()
            await asyncio.gather(*state.tasks, return_exceptions=True)
            raise
        out = self._build(batch, state.leaving)
        self._recorder.rows_out += out.num_rows
        WARNINGS.report(_health(state.leaving), self._partition, self._config.on_timeout.value)
        return out

    def _split(self, rows: list[dict[str, Any]]) -> Iterator[_Entry]:
        size = self._config.batch_size or 1
        for first in range(0, len(rows), size):
            yield _Entry(first=first, rows=rows[first : first + size])

    def _start(self, entry: _Entry, state: _BatchState) -> None:
        task = asyncio.get_running_loop().create_task(self._invoke(entry))
        state.tasks.add(task)
        state.queue.put(entry)
        task.add_done_callback(functools.partial(self._on_done, state, entry))

    @staticmethod
    def _on_done(state: _BatchState, entry: _Entry, task: asyncio.Task[None]) -> None:
        state.tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            state.failures.append(error)
        else:
            state.queue.complete(entry)
        state.wake.set()

    @staticmethod
    async def _collect(state: _BatchState) -> None:
        await state.wake.wait()
        state.wake.clear()
        if state.failures:
            raise state.failures[0]
        state.leaving.extend(state.queue.pop_ready())

    async def _invoke(self, entry: _Entry) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        self._recorder.request_started()
        finished = False
        try:
            try:
                result = await _with_timeout(
                    call_with_retries(
                        self._fn,
                        self._payload(entry),
                        self._config.retry,
                        functools.partial(self._count_retry, entry),
                    ),
                    self._config.timeout_s,
                )
            except asyncio.TimeoutError:  # user errors arrive as UserFailure: this is ours
                finished = True
                self._timed_out(entry)
                return
            except UserFailure as failure:
                finished = True
                raise self._failed(entry, failure) from failure.error
            finished = True
            entry.values = self._validated(entry, result)
        finally:
            self._recorder.request_finished((loop.time() - started) * 1000.0 if finished else None)

    def _payload(self, entry: _Entry) -> Any:
        return entry.rows if self._config.batch_size is not None else entry.rows[0]

    def _count_retry(self, entry: _Entry) -> None:
        entry.retried = True
        self._recorder.retries += 1

    def _position(self, entry: _Entry) -> tuple[int, int]:
        return self._partition, self._rows_seen + entry.first

    def _timed_out(self, entry: _Entry) -> None:
        entry.timed_out = True
        self._recorder.timeouts += 1
        outcome = self._config.on_timeout
        if outcome is OnTimeout.FAIL:
            detail = (
                f"request timed out after {self._config.timeout_s} s "
                f"({len(entry.rows)} row(s)); on_timeout='fail'"
            )
            raise row_error(AsyncCode.REQUEST_TIMEOUT, *self._position(entry), detail)
        if outcome is OnTimeout.DROP:
            entry.dropped = True
            self._recorder.dropped += len(entry.rows)
        else:
            entry.values = [self._default] * len(entry.rows)
            self._recorder.defaulted += len(entry.rows)

    def _failed(self, entry: _Entry, failure: UserFailure) -> AsyncIOError:
        error = failure.error
        detail = f"{type(error).__name__}: {error} (after {failure.attempts} attempt(s))"
        return row_error(AsyncCode.REQUEST_FAILED, *self._position(entry), detail)

    def _validated(self, entry: _Entry, result: object) -> list[Enrichment]:
        checked = validate_result(
            result, len(entry.rows), self._config.batch_size is not None, self._names
        )
        if isinstance(checked, str):
            raise row_error(AsyncCode.ENRICHMENT_RESULT, *self._position(entry), checked)
        return checked

    def _build(self, batch: pa.RecordBatch, leaving: list[_Entry]) -> pa.RecordBatch:
        positions: list[int] = []
        values: list[Enrichment] = []
        for entry in leaving:
            if not entry.dropped:
                positions.extend(range(entry.first, entry.first + len(entry.rows)))
                values.extend(entry.values)
        kept = batch.take(pa.array(positions, type=pa.int64()))
        columns = list(kept.columns)
        fields = list(batch.schema)
        for f in self._schema:
            columns.append(self._column(f, values, positions))
            fields.append(f.with_nullable(True))
        return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))

    def _column(self, f: pa.Field, values: list[Enrichment], positions: list[int]) -> pa.Array:
        cells = [None if v is None else v.get(f.name) for v in values]
        try:
            return pa.array(cells, type=f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            for cell, pos in zip(cells, positions, strict=True):
                try:
                    pa.array([cell], type=f.type)
                except (
                    pa.ArrowInvalid,
                    pa.ArrowTypeError,
                    OverflowError,
                    TypeError,
                    ValueError,
                ) as exc:
                    detail = f"column {f.name!r} ({f.type}) cannot hold {cell!r}: {exc}"
                    raise row_error(
                        AsyncCode.ENRICHMENT_RESULT, self._partition, self._rows_seen + pos, detail
                    ) from exc
            raise


def _health(entries: list[_Entry]) -> BatchHealth:
    """Count what the requests of one batch went through (for the rate-limited warning)."""
    return BatchHealth(
        requests=len(entries),
        timed_out=sum(e.timed_out for e in entries),
        retried=sum(e.retried for e in entries),
        dropped_rows=sum(len(e.rows) for e in entries if e.dropped),
        defaulted_rows=sum(len(e.rows) for e in entries if e.timed_out and not e.dropped),
    )


async def _with_timeout(call: Coroutine[Any, Any, Any], timeout_s: float) -> Any:
    """Await ``call`` for at most ``timeout_s`` seconds, else raise asyncio.TimeoutError."""
    if sys.version_info >= (3, 11):  # no extra task per request, unlike wait_for
        async with asyncio.timeout(timeout_s):
            return await call
    return await asyncio.wait_for(call, timeout_s)


def check_enrichment_schema(schema: object) -> pa.Schema:
    """Validate the enrichment schema: a non-empty pyarrow Schema with unique names."""
    if not isinstance(schema, pa.Schema):
        msg = f"enrichment schema must be a pyarrow.Schema, got {type(schema).__name__}"
        raise AsyncIOError(msg, code=TxnCode.CONFIG)
    if len(schema) == 0:
        msg = "enrichment schema must have at least one column"
        raise AsyncIOError(msg, code=TxnCode.CONFIG)
    names = schema.names
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        msg = f"enrichment schema repeats column names {duplicates}"
        raise AsyncIOError(msg, code=TxnCode.CONFIG)
    return schema
