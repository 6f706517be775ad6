"""Unit tests of ``connectors.stage._lifecycle``: handing a sink's epoch log to a new object.

Doubles stand in for the sink objects (the real ones run in
integration_tests/postgres/test_pg_sink_lifecycle.py with Spark and PostgreSQL).
"""

from __future__ import annotations

import gc
import pickle
from typing import Any

import pytest

from connectors.kafka import KafkaSink
from connectors.stage import StageCode, StageError
from connectors.stage._lifecycle import RunningQuery, SinkResources, leave, owner_key, take_over
from txn import FileEpochLog, TxnCode, TxnError, has_code


class Owner:
    """A sink object as the registry sees it: busy with a reason, or idle."""

    def __init__(self, sink_id: str, busy: str | None = None) -> None:
        self.sink_id = sink_id
        self.busy = busy
        self.released_for: list[str | None] = []

    def release_for_successor(self, query_id: str | None) -> str | None:
        if self.busy is None:
            self.released_for.append(query_id)
        return self.busy


KEY = owner_key("Kind", "s")


def test_an_idle_holder_is_released_for_the_successor() -> None:
    first, second = Owner("s"), Owner("s")
    take_over(KEY, first, "q1")
    take_over(KEY, first, "q1")  # the holder itself: nothing to release
    assert first.released_for == []
    take_over(KEY, second, "q2")
    assert first.released_for == ["q2"]
    leave(KEY, second)


def test_a_busy_holder_refuses_with_a_typed_error_naming_what_runs() -> None:
    first, second = Owner("s", busy="its query q1 is still active"), Owner("s")
    take_over(KEY, first, "q1")
    with pytest.raises(
        StageError,
        match="its query q1 is still active",
        check=lambda e: e.code is StageCode.SINK_IN_USE,
    ) as info:
        take_over(KEY, second, "q2")
    assert has_code(info.value, StageCode.SINK_IN_USE) and not info.value.retry_stage
    assert "query.stop()" in str(info.value) and "another sink_id" in str(info.value)
    first.busy = None  # the query stopped: the refused object takes over now
    take_over(KEY, second, "q2")
    assert first.released_for == ["q2"]
    leave(KEY, first)  # not the holder any more: no effect
    third = Owner("s")
    take_over(KEY, third, None)
    assert second.released_for == [None]
    leave(KEY, third)


def test_other_sink_ids_and_kinds_do_not_meet() -> None:
    busy = Owner("s", busy="running")
    take_over(KEY, busy, "q1")
    take_over(owner_key("Kind", "t"), Owner("t"), "q2")
    take_over(owner_key("OtherKind", "s"), Owner("s"), "q3")
    leave(KEY, busy)


def test_a_collected_holder_is_forgotten() -> None:
    take_over(KEY, Owner("s", busy="running"), "q1")
    gc.collect()
    take_over(KEY, Owner("s"), "q2")  # the busy one is gone: no refusal


class Session:
    """A SparkSession double: a stopped SparkContext, or a JVM that cannot answer."""

    def __init__(self, jsc: Any) -> None:
        self.sparkContext = type("SC", (), {"_jsc": jsc, "_jvm": None})()


def test_a_running_query_is_not_busy_for_its_own_restart_nor_once_spark_stopped() -> None:
    stopped = RunningQuery("q1", Session(jsc=None))
    assert stopped.active() is False and stopped.why_busy("q2") is None
    unknown = RunningQuery("q1", Session(jsc=object()))  # _jvm None: py4j cannot be asked
    assert unknown.active() is None
    assert unknown.why_busy("q1") is None  # the same query id runs once: that run ended
    text = unknown.why_busy("q2")
    assert text is not None and "call close()" in text


def test_a_sink_object_holds_its_log_until_closed_also_after_pickling(tmp_path: Any) -> None:
    def sink() -> KafkaSink:  # a file log: no network I/O on the way
        return KafkaSink("localhost:1", "t", "s", epoch_log=tmp_path / "log")

    first = sink()
    log = first._open_log()  # the first write does this
    with pytest.raises(TxnError, check=lambda e: e.code is TxnCode.EPOCH_LOG_LOCKED):
        FileEpochLog(tmp_path / "log", sink_id="s")  # another process would be refused
    second = sink()
    assert second._open_log().load().sink_id == "s"  # took it over
    with pytest.raises(TxnError, match="closed", check=lambda e: e.code is TxnCode.EPOCH_LOG):
        log.load()  # the first object's log was closed for the second
    copy = pickle.loads(pickle.dumps(second))
    with copy:  # the copy has no log open; the block closes nothing of the original's
        assert copy.sink_id == "s"
    with second:
        pass
    second.close()
    FileEpochLog(tmp_path / "log", sink_id="s").close()  # free again
    first.close()


def test_a_collected_sink_object_releases_its_log(tmp_path: Any) -> None:
    sink = KafkaSink("localhost:1", "t", "s", epoch_log=tmp_path / "log")
    sink._open_log()  # the first write does this
    del sink
    gc.collect()
    FileEpochLog(tmp_path / "log", sink_id="s").close()  # the lock went with the object


class Connector:
    """A connector double counting how often its driver-side clients were closed."""

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_shared_clients_close_only_once_no_live_object_holds_the_log() -> None:
    key = owner_key("Kind", "shared")
    connector = Connector()
    resources = SinkResources(key=key, connectors=(connector,))  # type: ignore[arg-type]
    holder = Owner("shared")
    take_over(key, holder, "q1")
    resources.collected()  # another object of the key holds the log: it shares the clients
    assert connector.closed == 0
    assert leave(key, holder)
    resources.collected()
    assert connector.closed == 1


def test_close_without_waiting_leaves_a_sink_that_is_writing_alone(tmp_path: Any) -> None:
    sink = KafkaSink("localhost:1", "t", "s", epoch_log=tmp_path / "log")
    log = sink._open_log()  # the first write does this
    with sink._lock:  # as while a batch is written
        assert not sink.close(wait=False)
        assert log.load().sink_id == "s"  # still open
    assert sink.close(wait=False) and sink.close()
    FileEpochLog(tmp_path / "log", sink_id="s").close()
