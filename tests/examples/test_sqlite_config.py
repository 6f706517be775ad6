"""The SQLite example's config, errors and classifier (no Spark; real sqlite3 files)."""

from __future__ import annotations

import os
import pickle
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from connectors.examples.sqlite import (
    SqliteCode,
    SqliteSink,
    SqliteSinkConfig,
    SqliteSinkError,
    classify,
)
from connectors.examples.sqlite._database import prepare_database, table_columns
from connectors.examples.sqlite._errors import to_sink_error
from connectors.examples.sqlite._participant import SqliteResource
from txn import (
    CommitMode,
    EpochPlan,
    ErrorAction,
    Guarantee,
    RowSummary,
    TxnCode,
    TxnError,
    can_retry_stage,
    has_code,
)


def config(tmp_path: Path, **options: object) -> SqliteSinkConfig:
    return SqliteSinkConfig.build(
        path=str(tmp_path / "db.sqlite"), table="t", sink_id="s", **options
    )


def test_defaults_are_exactly_once_unaligned_and_paths_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = SqliteSinkConfig.build(path="db.sqlite", table="t", sink_id="s")
    assert cfg.guarantee is Guarantee.EXACTLY_ONCE and cfg.mode is CommitMode.UNALIGNED
    assert cfg.path == str(tmp_path / "db.sqlite")  # executors have another working directory
    assert cfg.epoch_log_path == str(tmp_path / "db.sqlite.s.epochs")


@pytest.mark.parametrize("mode", ["aligned", CommitMode.ALIGNED])
def test_aligned_exactly_once_is_refused_with_a_typed_error(tmp_path: Path, mode: object) -> None:
    with pytest.raises(
        SqliteSinkError, match="unaligned", check=lambda e: e.code is SqliteCode.ALIGNED_MODE
    ):
        config(tmp_path, mode=mode)
    with pytest.raises(SqliteSinkError, check=lambda e: e.code is SqliteCode.ALIGNED_MODE):
        SqliteSink(tmp_path / "db.sqlite", "t", "s", mode=mode)
    # the mode means nothing without exactly-once: accepted there
    assert config(tmp_path, mode=mode, guarantee="at-least-once").mode is CommitMode.ALIGNED


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"parallelism": 0}, "parallelism"),
        ({"stage_retries": -5}, "stage_retries"),
        ({"vote_channel": "carrier-pigeon"}, "vote_channel"),
        ({"guarantee": "twice"}, "guarantee"),
        ({"sink_id": "a:b"}, "sink_id"),
        ({"table": ""}, "table"),
        ({"path": ":memory:"}, "path"),
        ({"epoch_log": ""}, "epoch_log"),
        ({"busy_timeout_s": 0}, "busy_timeout_s"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_options_are_named(tmp_path: Path, options: dict[str, object], named: str) -> None:
    base: dict[str, object] = {"path": str(tmp_path / "db.sqlite"), "table": "t", "sink_id": "s"}
    with pytest.raises(
        SqliteSinkError, match=named, check=lambda e: e.code is TxnCode.CONFIG
    ) as info:
        SqliteSinkConfig.build(**{**base, **options})
    assert has_code(info.value, TxnCode.CONFIG) and not can_retry_stage(info.value)


def test_the_stage_checks_run_without_build_too(tmp_path: Path) -> None:
    with pytest.raises(TxnError, match="parallelism", check=lambda e: e.code is TxnCode.CONFIG):
        SqliteSinkConfig(path=str(tmp_path / "x"), table="t", sink_id="s", parallelism=0)


def test_fingerprint_covers_table_and_routing(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    assert cfg.fingerprint() == config(tmp_path, parallelism=4).fingerprint()
    assert (
        cfg.fingerprint()
        != SqliteSinkConfig.build(path=cfg.path, table="u", sink_id="s").fingerprint()
    )
    assert cfg.fingerprint() != config(tmp_path, order_by=["id"]).fingerprint()


def test_config_resource_and_errors_pickle(tmp_path: Path) -> None:
    resource = SqliteResource(config(tmp_path, parallelism=2), ("id",))
    assert pickle.loads(pickle.dumps(resource)) == resource
    error = SqliteSinkError("no", action=ErrorAction.FATAL, sqlite_code=8, code=SqliteCode.REJECTED)
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), str(back), back.action, back.code, back.sqlite_code) == (
        SqliteSinkError,
        "[rejected] no",
        ErrorAction.FATAL,
        SqliteCode.REJECTED,
        8,
    )
    assert not back.retry_stage
    missing = pickle.loads(pickle.dumps(SqliteSinkError("gone", code=SqliteCode.TABLE_NOT_FOUND)))
    assert missing.code is SqliteCode.TABLE_NOT_FOUND and str(missing) == "[table-not-found] gone"


def test_missing_database_or_table_is_typed_and_creates_nothing(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    with pytest.raises(
        SqliteSinkError,
        match="does not exist",
        check=lambda e: e.code is SqliteCode.TABLE_NOT_FOUND,
    ):
        prepare_database(cfg)
    assert not os.path.exists(cfg.path)  # never an empty database by mistake
    sqlite3.connect(cfg.path).close()
    with pytest.raises(
        SqliteSinkError, match="table 't'", check=lambda e: e.code is SqliteCode.TABLE_NOT_FOUND
    ):
        prepare_database(cfg)
    with sqlite3.connect(cfg.path) as db:
        db.execute("CREATE TABLE t (id INTEGER NOT NULL, name TEXT)")
    prepare_database(cfg)
    prepare_database(cfg)  # idempotent
    assert table_columns(cfg) == ("id", "name")


def real_error(db: Path, statement: str) -> sqlite3.Error:
    with sqlite3.connect(db, timeout=0) as conn:
        try:
            conn.execute(statement)
        except sqlite3.Error as exc:
            return exc
    raise AssertionError(f"{statement} did not fail")


def test_classifier_maps_result_codes(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER NOT NULL)")
    constraint = real_error(db, "INSERT INTO t VALUES (NULL)")
    assert classify(constraint) is ErrorAction.ABORT
    assert to_sink_error(constraint, "x").code is SqliteCode.REJECTED
    unknown = real_error(db, "SELECT * FROM nowhere")
    assert classify(unknown) is ErrorAction.ABORT
    assert to_sink_error(unknown, "x").code is SqliteCode.WRITE

    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
    try:
        busy = real_error(db, "INSERT INTO t VALUES (1)")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert classify(busy) is ErrorAction.RETRY
    error = to_sink_error(busy, "writing")
    assert error.code is SqliteCode.WRITE and can_retry_stage(error)
    assert error.sqlite_code == sqlite3.SQLITE_BUSY and "SQLITE_BUSY" in str(error)

    with sqlite3.connect(db.as_uri() + "?mode=ro", uri=True) as conn:  # a read-only file
        with pytest.raises(sqlite3.Error) as info:
            conn.execute("INSERT INTO t VALUES (1)")
    assert classify(info.value) is ErrorAction.FATAL
    assert not can_retry_stage(to_sink_error(info.value, "x"))


def test_a_second_instance_of_a_partition_stops_at_the_marker(tmp_path: Path) -> None:
    """Two live attempts of one partition (a Spark task retry): the second one to take the
    write lock sees the first one's commit of the epoch and raises."""
    cfg = config(tmp_path)
    with sqlite3.connect(cfg.path) as db:
        db.execute("CREATE TABLE t (id INTEGER)")
    prepare_database(cfg)
    resource = SqliteResource(cfg, ("id",))
    plan = EpochPlan(
        sink_id="s",
        epoch=0,
        parallelism=1,
        fingerprint=cfg.fingerprint(),
        mode=CommitMode.UNALIGNED,
    )
    old, new = resource.open(plan, 0), resource.open(plan, 0)
    try:
        assert old.committed_marker() is None and new.committed_marker() is None
        old.begin(0)
        raised: list[BaseException] = []

        def second() -> None:
            try:
                new.begin(0)  # waits for the write lock, then finds epoch 0 committed
            except BaseException as exc:  # noqa: BLE001 - checked in the test's thread
                raised.append(exc)

        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.2)  # let it block on the lock (it is also correct if it has not yet)
        old.pre_commit(RowSummary(0, "u0"))
        old.commit()
        waiter.join()
        new.abort()
        assert len(raised) == 1 and has_code(raised[0], SqliteCode.PARTITION_CONFLICT), raised
        assert "another instance committed epoch 0" in str(raised[0])
    finally:
        old.close()
        new.close()


def test_the_sink_pickles_with_its_config(tmp_path: Path) -> None:
    """Spark Connect ships the foreachBatch function pickled: the config travels with it."""
    sink = SqliteSink(tmp_path / "db.sqlite", "t", "s", parallelism=3)
    back = pickle.loads(pickle.dumps(sink))
    assert back.config == sink.config and back.sink_id == "s"
