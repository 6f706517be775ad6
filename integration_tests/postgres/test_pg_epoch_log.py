"""PostgresEpochLog: durability, corruption detection, fencing, compaction (real server).

Mirrors tests/txn/test_txn_epoch_log.py for the file log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from connectors.postgres import PostgresEpochLog, PostgresSinkConfig, PostgresSinkError
from connectors.postgres._control import LOG_HEAD_TABLE, LOG_TABLE, qualified
from integration_tests.postgres.conftest import Conn
from txn import EpochCompletion, EpochPlan, EpochState, QueryBinding, TxnCode, TxnError, has_code
from txn._codec import seal, unseal
from txn._errors import EPOCH_LOG_CODES
from txn._model import EpochDecision

Make = Callable[..., PostgresSinkConfig]


def commit_epoch(log: PostgresEpochLog, epoch: int, parallelism: int = 2) -> None:
    log.append(
        EpochPlan(sink_id=log.sink_id, epoch=epoch, parallelism=parallelism, fingerprint="fp")
    )
    log.append(EpochDecision(sink_id=log.sink_id, epoch=epoch, commit=True))
    log.append(EpochCompletion(log.sink_id, epoch, committed=True))


def records(pg: Conn, schema: str, sink: str) -> list[tuple[int, str]]:
    return pg.execute(
        sql.SQL("SELECT seq, record FROM {} WHERE sink_id = %s ORDER BY seq").format(
            qualified(schema, LOG_TABLE)
        ),
        (sink,),
    ).fetchall()


def test_records_survive_reopen_and_generation_increases(make_cfg: Make) -> None:
    cfg = make_cfg()
    with PostgresEpochLog(cfg) as log:
        assert log.generation == 1
        commit_epoch(log, 0)
        log.append(EpochPlan(sink_id=cfg.sink_id, epoch=1, parallelism=3, fingerprint="fp"))
    with PostgresEpochLog(cfg) as log:
        assert log.generation == 2
        history = log.load()
        assert history.state(0) is EpochState.COMMITTED
        assert [p.epoch for p in history.in_doubt()] == [1]
        assert history.max_parallelism() == 3 and history.last_committed_epoch() == 0


def test_sinks_share_the_tables_but_not_the_records(make_cfg: Make) -> None:
    a, b = make_cfg(), make_cfg(sink_id="other-sink")
    with PostgresEpochLog(a) as log_a, PostgresEpochLog(b) as log_b:
        commit_epoch(log_a, 0)
        log_b.append(EpochPlan(sink_id=b.sink_id, epoch=7, parallelism=1, fingerprint="fp"))
        assert log_a.load().epochs() == [0] and log_b.load().epochs() == [7]


def test_illegal_record_is_refused_and_not_written(pg: Conn, schema: str, make_cfg: Make) -> None:
    cfg = make_cfg()
    with PostgresEpochLog(cfg) as log:
        log.append(EpochPlan(sink_id=cfg.sink_id, epoch=0, parallelism=2, fingerprint="fp"))
        log.append(EpochDecision(sink_id=cfg.sink_id, epoch=0, commit=True))
        before = records(pg, schema, cfg.sink_id)
        with pytest.raises(
            TxnError,
            match="commit-decided -> aborted",
            check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION,
        ):
            log.append(EpochCompletion(cfg.sink_id, 0, committed=False))
        with pytest.raises(
            TxnError, match="belongs to sink", check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION
        ):
            log.append(EpochCompletion("someone-else", 0, committed=True))
        assert records(pg, schema, cfg.sink_id) == before


def test_second_coordinator_is_refused_while_the_first_runs(make_cfg: Make) -> None:
    cfg = make_cfg()
    first = PostgresEpochLog(cfg)
    with pytest.raises(
        PostgresSinkError,
        match="held by another coordinator.*backend pid",
        check=lambda e: e.code is TxnCode.EPOCH_LOG_LOCKED,
    ) as info:
        PostgresEpochLog(cfg)
    assert has_code(info.value, TxnCode.EPOCH_LOG_LOCKED)
    first.close()
    with PostgresEpochLog(cfg) as second:
        assert second.generation == 2


def test_a_read_only_log_reads_beside_the_owner_and_never_writes(
    pg: Conn, schema: str, make_cfg: Make
) -> None:
    cfg = make_cfg()
    missing = make_cfg(control_schema=f"{schema}_none")  # no control tables: an empty log
    with PostgresEpochLog(missing, read_only=True) as reader:
        assert reader.load().records == ()
    assert pg.execute(
        "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (f"{schema}_none",)
    ).fetchone() == (0,)  # no DDL either
    with PostgresEpochLog(cfg) as owner:
        commit_epoch(owner, 0)
        owner.append(EpochPlan(sink_id=cfg.sink_id, epoch=1, parallelism=2, fingerprint="fp"))
        with PostgresEpochLog(cfg, read_only=True) as reader:  # no lock: the owner holds it
            history = reader.load()
            assert history.state(0) is EpochState.COMMITTED
            assert [p.epoch for p in history.in_doubt()] == [1]
            before = records(pg, schema, cfg.sink_id)
            with pytest.raises(
                TxnError, match="read-only", check=lambda e: e.code in EPOCH_LOG_CODES
            ):
                reader.append(EpochCompletion(cfg.sink_id, 1, committed=False))
            assert records(pg, schema, cfg.sink_id) == before
        owner.append(
            EpochDecision(sink_id=cfg.sink_id, epoch=1, commit=False)
        )  # the owner is not fenced
        assert owner.generation == 1
    with PostgresEpochLog(cfg) as again:
        assert again.generation == 2  # the reader took no generation


def _terminate(pg: Conn, cfg: PostgresSinkConfig) -> None:
    pg.execute(
        "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
        "WHERE application_name = %s AND pid <> pg_backend_pid()",
        (f"eos {cfg.sink_id} coordinator",),
    )


def test_a_coordinator_that_lost_its_session_is_fenced_once_another_took_over(
    pg: Conn, make_cfg: Make
) -> None:
    cfg = make_cfg()
    first = PostgresEpochLog(cfg)
    first.append(EpochPlan(sink_id=cfg.sink_id, epoch=0, parallelism=1, fingerprint="fp"))
    _terminate(pg, cfg)  # the first coordinator's session (and advisory lock) is gone
    second = PostgresEpochLog(cfg)
    with pytest.raises(
        PostgresSinkError,
        match="held by another coordinator",
        check=lambda e: e.code is TxnCode.EPOCH_LOG_LOCKED,
    ):
        first.append(EpochCompletion(cfg.sink_id, 0, committed=True))  # lock taken: refused
    with pytest.raises(TxnError, match="closed", check=lambda e: e.code in EPOCH_LOG_CODES):
        first.load()  # a fenced coordinator released the log for good
    second.close()
    with PostgresEpochLog(cfg) as third:
        third.append(EpochCompletion(cfg.sink_id, 0, committed=True))
        assert third.load().is_committed(0)


def test_a_coordinator_is_fenced_by_generation_when_the_lock_is_free_again(
    pg: Conn, make_cfg: Make
) -> None:
    cfg = make_cfg()
    first = PostgresEpochLog(cfg)
    first.append(EpochPlan(sink_id=cfg.sink_id, epoch=0, parallelism=1, fingerprint="fp"))
    _terminate(pg, cfg)
    PostgresEpochLog(cfg).close()  # another coordinator came and went: generation 2
    with pytest.raises(
        PostgresSinkError,
        match=r"taken over .*\(generation 2, ours 1\)",
        check=lambda e: e.code is TxnCode.EPOCH_LOG_LOCKED,
    ):
        first.append(EpochCompletion(cfg.sink_id, 0, committed=True))
    with PostgresEpochLog(cfg) as third:
        assert third.generation == 3 and not third.load().is_committed(0)


def test_a_lost_session_alone_is_reconnected(pg: Conn, make_cfg: Make) -> None:
    cfg = make_cfg()
    with PostgresEpochLog(cfg) as log:
        log.append(EpochPlan(sink_id=cfg.sink_id, epoch=0, parallelism=1, fingerprint="fp"))
        _terminate(pg, cfg)
        log.append(EpochCompletion(cfg.sink_id, 0, committed=True))  # reconnects, same owner
        assert log.load().is_committed(0) and log.generation == 1


def test_closed_log_refuses_use(make_cfg: Make) -> None:
    log = PostgresEpochLog(make_cfg())
    log.close()
    log.close()
    with pytest.raises(TxnError, match="closed", check=lambda e: e.code in EPOCH_LOG_CODES):
        log.load()


def _written(make_cfg: Make) -> PostgresSinkConfig:
    cfg = make_cfg()
    with PostgresEpochLog(cfg) as log:
        commit_epoch(log, 0)
        log.append(EpochPlan(sink_id=cfg.sink_id, epoch=1, parallelism=2, fingerprint="fp"))
    return cfg


def test_an_altered_record_is_reported_with_table_sink_and_seq(
    pg: Conn, schema: str, make_cfg: Make
) -> None:
    cfg = _written(make_cfg)
    table = qualified(schema, LOG_TABLE)
    original = records(pg, schema, cfg.sink_id)
    for seq, text in original:
        for i in range(0, len(text), 7):  # flip one character in every 7th position
            damaged = text[:i] + chr(ord(text[i]) ^ 1) + text[i + 1 :]
            pg.execute(
                sql.SQL("UPDATE {} SET record = %s WHERE sink_id = %s AND seq = %s").format(table),
                (damaged, cfg.sink_id, seq),
            )
            with pytest.raises(
                TxnError,
                match=rf"{LOG_TABLE} of sink .* seq {seq}",
                check=lambda e: e.code is TxnCode.EPOCH_LOG_CORRUPT,
            ):
                PostgresEpochLog(cfg).close()
        pg.execute(
            sql.SQL("UPDATE {} SET record = %s WHERE sink_id = %s AND seq = %s").format(table),
            (text, cfg.sink_id, seq),
        )
    with PostgresEpochLog(cfg) as log:
        assert log.load().state(1) is EpochState.PLANNED


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_a_removed_record_is_detected(pg: Conn, schema: str, make_cfg: Make, which: str) -> None:
    cfg = _written(make_cfg)
    seqs = [seq for seq, _ in records(pg, schema, cfg.sink_id)]
    seq = {"first": seqs[0], "middle": seqs[1], "last": seqs[-1]}[which]
    pg.execute(
        sql.SQL("DELETE FROM {} WHERE sink_id = %s AND seq = %s").format(
            qualified(schema, LOG_TABLE)
        ),
        (cfg.sink_id, seq),
    )
    with pytest.raises(
        TxnError, match="removed or added", check=lambda e: e.code is TxnCode.EPOCH_LOG_CORRUPT
    ):
        PostgresEpochLog(cfg)


def test_an_altered_or_missing_header_is_detected(pg: Conn, schema: str, make_cfg: Make) -> None:
    cfg = _written(make_cfg)
    head = qualified(schema, LOG_HEAD_TABLE)
    changed = pg.execute(
        sql.SQL(
            "UPDATE {} SET header = regexp_replace(header, '\"next_seq\":[0-9]+', "
            "'\"next_seq\":99') WHERE sink_id = %s"
        ).format(head),
        (cfg.sink_id,),
    )
    assert changed.rowcount == 1
    with pytest.raises(
        TxnError, match="header.*checksum", check=lambda e: e.code is TxnCode.EPOCH_LOG_CORRUPT
    ):
        PostgresEpochLog(cfg)
    pg.execute(sql.SQL("DELETE FROM {} WHERE sink_id = %s").format(head), (cfg.sink_id,))
    with pytest.raises(
        TxnError, match="header row is missing", check=lambda e: e.code is TxnCode.EPOCH_LOG_CORRUPT
    ):
        PostgresEpochLog(cfg)


def test_compaction_keeps_recent_history_and_facts(pg: Conn, schema: str, make_cfg: Make) -> None:
    cfg = make_cfg()
    with PostgresEpochLog(cfg, retain_epochs=3) as log:
        commit_epoch(log, 0, parallelism=7)
        for epoch in range(1, 20):
            commit_epoch(log, epoch)
        log.append(EpochPlan(sink_id=cfg.sink_id, epoch=20, parallelism=2, fingerprint="fp"))
    with PostgresEpochLog(cfg, retain_epochs=3) as log:
        history = log.load()
        assert history.epochs() == [16, 17, 18, 19, 20]
        assert history.committed_through == 15 and history.is_committed(0)
        assert history.max_parallelism() == 7  # remembered for abort_lingering
        with pytest.raises(
            TxnError,
            match="already committed",
            check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION,
        ):
            log.append(EpochPlan(sink_id=cfg.sink_id, epoch=3, parallelism=2, fingerprint="fp"))
    assert len(records(pg, schema, cfg.sink_id)) == 13


def test_acknowledged_records_survive_a_crash_of_the_server(own_server: Any) -> None:
    cfg = PostgresSinkConfig.build(dsn=own_server.dsn, table="t", sink_id="durable")
    log = PostgresEpochLog(cfg)
    commit_epoch(log, 0)
    log.append(EpochPlan(sink_id=cfg.sink_id, epoch=1, parallelism=4, fingerprint="fp"))
    log.append(EpochDecision(sink_id=cfg.sink_id, epoch=1, commit=True))
    own_server.kill()  # SIGKILL: only what was committed (fsync'd WAL) survives
    own_server.start()
    cfg = PostgresSinkConfig.build(dsn=own_server.dsn, table="t", sink_id="durable")
    log.close()
    with PostgresEpochLog(cfg) as reopened:
        history = reopened.load()
        assert history.is_committed(0) and history.state(1) is EpochState.COMMIT_DECIDED
        reopened.append(EpochCompletion(cfg.sink_id, 1, committed=True))
    own_server.restart()
    with PostgresEpochLog(cfg) as again, psycopg.connect(own_server.dsn) as conn:
        assert again.load().is_committed(1) and again.generation == 3
        assert conn.execute("SELECT count(*) FROM eos.epoch_log").fetchone() == (6,)


def bind(log: PostgresEpochLog, query: str, offset: int) -> None:
    log.append(QueryBinding(log.sink_id, query, offset))


@pytest.mark.parametrize("epochs", [0, 1, 12])
def test_a_new_binding_replaces_the_old_one_after_any_number_of_epochs(
    pg: Conn, schema: str, make_cfg: Make, epochs: int
) -> None:
    cfg = make_cfg()
    with PostgresEpochLog(cfg, retain_epochs=3) as log:
        bind(log, "q1", 0)
        for epoch in range(epochs):
            commit_epoch(log, epoch)
        bind(log, "q2", epochs)  # start over: above every epoch of the log
        commit_epoch(log, epochs)
        bind(log, "q3", epochs + 1)
    with PostgresEpochLog(cfg, retain_epochs=3) as log:
        history = log.load()
        assert history.binding == QueryBinding(cfg.sink_id, "q3", epochs + 1)
        assert history.last_committed_epoch() == epochs
        kept = [r for r in history.records if isinstance(r, QueryBinding)]
        assert kept == [history.binding], "the replaced bindings are gone from the table"
    seqs = [seq for seq, _ in records(pg, schema, cfg.sink_id)]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) and len(seqs) == len(history.records)


def test_a_binding_older_than_the_compacted_epochs_stays(
    pg: Conn, schema: str, make_cfg: Make
) -> None:
    cfg = make_cfg()
    with PostgresEpochLog(cfg, retain_epochs=2) as log:
        bind(log, "q1", 0)
        for epoch in range(10):
            commit_epoch(log, epoch)
    with PostgresEpochLog(cfg, retain_epochs=2) as log:
        history = log.load()
        assert history.binding == QueryBinding(cfg.sink_id, "q1", 0)
        assert history.epochs() == [7, 8, 9] and history.committed_through == 6
        commit_epoch(log, 10)
    assert len(records(pg, schema, cfg.sink_id)) == 1 + 3 * 3


def _earlier_release_layout(pg: Conn, schema: str, make_cfg: Make, through: int | None) -> Any:
    """The rows an earlier release left: the binding kept its seq, epochs 0..6 compacted."""
    cfg = make_cfg()
    with PostgresEpochLog(cfg) as log:
        bind(log, "q1", 0)
        for epoch in range(10):
            commit_epoch(log, epoch)
    pg.execute(
        sql.SQL("DELETE FROM {} WHERE sink_id = %s AND seq BETWEEN 1 AND 21").format(
            qualified(schema, LOG_TABLE)
        ),
        (cfg.sink_id,),
    )
    head = qualified(schema, LOG_HEAD_TABLE)
    row = pg.execute(
        sql.SQL("SELECT header FROM {} WHERE sink_id = %s").format(head), (cfg.sink_id,)
    ).fetchone()
    assert row is not None
    header = unseal(row[0].encode(), source="test")
    header.update(committed_through=through, parallelism_floor=2)
    pg.execute(
        sql.SQL("UPDATE {} SET header = %s WHERE sink_id = %s").format(head),
        (seal(header).decode(), cfg.sink_id),
    )
    return cfg


def test_the_layout_an_earlier_release_left_after_compaction_is_read_and_renumbered(
    pg: Conn, schema: str, make_cfg: Make
) -> None:
    cfg = _earlier_release_layout(pg, schema, make_cfg, through=6)
    with PostgresEpochLog(cfg, retain_epochs=2) as log:
        history = log.load()
        assert history.binding == QueryBinding(cfg.sink_id, "q1", 0)
        assert history.epochs() == [7, 8, 9] and history.is_committed(3)
        commit_epoch(log, 10)
    seqs = [seq for seq, _ in records(pg, schema, cfg.sink_id)]
    assert seqs == list(range(seqs[0], seqs[0] + 10))
    with PostgresEpochLog(cfg) as log:
        assert log.load().epochs() == [8, 9, 10]


def test_a_gap_after_the_binding_without_compacted_epochs_is_corruption(
    pg: Conn, schema: str, make_cfg: Make
) -> None:
    cfg = _earlier_release_layout(pg, schema, make_cfg, through=None)
    with pytest.raises(
        TxnError, match="removed or added", check=lambda e: e.code is TxnCode.EPOCH_LOG_CORRUPT
    ):
        PostgresEpochLog(cfg)
