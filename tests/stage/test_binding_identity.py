"""Unit tests of ``connectors.stage._binding.QueryIdentity``: where a query's id comes from.

The batch DataFrame is a stand-in with the two things the identity reads: the local
property (classic sessions) and ``read.text`` of the checkpoint's ``metadata`` file. The
real thing under a Spark Connect server: integration_tests/connect/test_connect_exactly_once.py.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from connectors.stage import StageCode, StageError
from connectors.stage._binding import (
    QUERY_ID_PROPERTY,
    QueryIdentity,
    checkpoint_query_id,
    in_connect_foreach_batch,
)


class _Reader:
    def __init__(self, session: _Session) -> None:
        self.session = session

    def text(self, path: str, *, wholetext: bool) -> Any:
        assert wholetext
        self.session.reads.append(path)
        file = Path(path)
        if not file.exists():
            msg = f"[PATH_NOT_FOUND] Path does not exist: {path}"
            raise RuntimeError(msg)
        rows = [(file.read_text(),)]
        return types.SimpleNamespace(collect=lambda: rows)


class _Context:
    def __init__(self, query_id: str | None) -> None:
        self.query_id = query_id

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 - PySpark's name
        assert key == QUERY_ID_PROPERTY
        return self.query_id


class _Session:
    def __init__(self, query_id: str | None, *, connect: bool) -> None:
        self.reads: list[str] = []
        self.read = _Reader(self)
        self._context = None if connect else _Context(query_id)

    @property
    def sparkContext(self) -> _Context:  # noqa: N802 - PySpark's name
        if self._context is None:
            msg = "[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext"
            raise AttributeError(msg)
        return self._context


def _frame(query_id: str | None = None, *, connect: bool = False) -> Any:
    return types.SimpleNamespace(sparkSession=_Session(query_id, connect=connect))


def _checkpoint(tmp_path: Path, query_id: str) -> str:
    (tmp_path / "metadata").write_text('{"id":"%s"}\n' % query_id)  # noqa: UP031 - Spark's form
    return str(tmp_path)


def test_the_checkpoint_names_the_query(tmp_path: Path) -> None:
    location = _checkpoint(tmp_path, "q-1")
    df = _frame(connect=True)
    identity = QueryIdentity(location)
    assert identity.of(df, connect=True) == "q-1"
    assert identity.of(df, connect=True) == "q-1"
    assert df.sparkSession.reads == [f"{location}/metadata"]  # read once per process
    assert checkpoint_query_id(_frame(), location + "/") == "q-1"


@pytest.mark.parametrize("content", [None, "", "not json", '{"other": 1}', '{"id": ""}'])
def test_no_metadata_is_a_typed_error(tmp_path: Path, content: str | None) -> None:
    if content is not None:
        (tmp_path / "metadata").write_text(content)
    with pytest.raises(
        StageError, match="checkpointLocation", check=lambda e: e.code is StageCode.CHECKPOINT
    ):
        QueryIdentity(str(tmp_path)).of(_frame(connect=True), connect=True)


def test_classic_checks_the_checkpoint_against_the_running_query(tmp_path: Path) -> None:
    location = _checkpoint(tmp_path, "q-1")
    assert QueryIdentity(location).of(_frame("q-1"), connect=False) == "q-1"
    with pytest.raises(
        StageError, match="belongs to query q-1", check=lambda e: e.code is StageCode.CHECKPOINT
    ):
        QueryIdentity(location).of(_frame("q-2"), connect=False)


def test_a_new_query_on_a_new_checkpoint_at_the_same_path_is_read_again(tmp_path: Path) -> None:
    identity = QueryIdentity(_checkpoint(tmp_path, "q-1"))
    assert identity.of(_frame("q-1"), connect=False) == "q-1"
    _checkpoint(tmp_path, "q-2")  # the checkpoint deleted and made again by a new query
    assert identity.of(_frame("q-2"), connect=False) == "q-2"


def test_without_a_location_the_property_alone(tmp_path: Path) -> None:
    identity = QueryIdentity(None)
    assert identity.of(_frame("q-1"), connect=False) == "q-1"
    assert identity.of(_frame(None), connect=False) is None
    assert identity.of(_frame(connect=True), connect=True) is None  # a client's direct call


def test_connect_foreach_batch_without_a_location_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker = types.ModuleType("__main__")
    worker.__spec__ = types.SimpleNamespace(  # type: ignore[assignment]
        name="pyspark.sql.connect.streaming.worker.foreach_batch_worker"
    )
    assert not in_connect_foreach_batch()
    monkeypatch.setitem(sys.modules, "__main__", worker)
    assert in_connect_foreach_batch()
    with pytest.raises(
        StageError, match="checkpoint_location", check=lambda e: e.code is StageCode.SPARK_CONNECT
    ):
        QueryIdentity(None).of(_frame(connect=True), connect=True)
