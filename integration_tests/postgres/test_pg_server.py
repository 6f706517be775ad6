"""The embedded PostgreSQL manager itself: start, settings, restart, kill -9, clean-up."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
from psycopg import errors

from connectors.testing.postgres import EmbeddedPostgres, EmbeddedPostgresError


def _scalar(dsn: str, query: str) -> object:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return row[0]


def test_private_server_listens_on_loopback_with_its_own_directory(tmp_path: Path) -> None:
    with EmbeddedPostgres(tmp_path / "a") as a, EmbeddedPostgres(tmp_path / "b") as b:
        assert a.port != b.port
        assert a.data_dir != b.data_dir and (a.data_dir / "PG_VERSION").exists()
        assert _scalar(a.dsn, "SELECT inet_server_addr()::text") == "127.0.0.1/32"
        assert _scalar(a.dsn, "SHOW data_directory") == str(a.data_dir)
        assert _scalar(a.dsn, "SHOW unix_socket_directories") == ""
        assert str(_scalar(a.dsn, "SHOW server_version")).startswith("18")
    assert not a.running and not b.running


def test_prepared_transactions_can_be_disabled_and_enabled(tmp_path: Path) -> None:
    with EmbeddedPostgres(tmp_path, max_prepared_transactions=0) as pg:
        assert _scalar(pg.dsn, "SHOW max_prepared_transactions") == "0"
        with psycopg.connect(pg.dsn) as conn:
            conn.execute("SELECT 1")
            with pytest.raises(errors.ObjectNotInPrerequisiteState, match="disabled"):
                conn.execute("PREPARE TRANSACTION 'x'")
        pg.configure(max_prepared_transactions="7")
        pg.restart()
        assert _scalar(pg.dsn, "SHOW max_prepared_transactions") == "7"


def test_restart_keeps_data_port_and_prepared_transactions(tmp_path: Path) -> None:
    with EmbeddedPostgres(tmp_path) as pg:
        port = pg.port
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (x int)")
            conn.execute("INSERT INTO t VALUES (1)")
        with psycopg.connect(pg.dsn) as conn:
            conn.execute("INSERT INTO t VALUES (2)")
            conn.execute("PREPARE TRANSACTION 'kept'")
        pg.restart()
        assert pg.port == port
        assert _scalar(pg.dsn, "SELECT array_agg(x ORDER BY x)::text FROM t") == "{1}"
        assert _scalar(pg.dsn, "SELECT string_agg(gid, ',') FROM pg_prepared_xacts") == "kept"
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("COMMIT PREPARED 'kept'")
        assert _scalar(pg.dsn, "SELECT array_agg(x ORDER BY x)::text FROM t") == "{1,2}"


def test_kill_is_a_crash_and_start_recovers(tmp_path: Path) -> None:
    with EmbeddedPostgres(tmp_path) as pg:
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (x int)")
            conn.execute("INSERT INTO t VALUES (1)")
        prepared = psycopg.connect(pg.dsn)
        prepared.execute("INSERT INTO t VALUES (2)")
        prepared.execute("PREPARE TRANSACTION 'survives'")
        open_txn = psycopg.connect(pg.dsn)
        open_txn.execute("INSERT INTO t VALUES (3)")  # never committed: lost in the crash
        pid = pg.postmaster_pid()
        pg.kill()
        assert not pg.running and pid is not None
        assert not Path(f"/proc/{pid}").exists()  # reaped, not a zombie
        with pytest.raises(psycopg.OperationalError):
            open_txn.execute("SELECT 1")
        pg.start()
        assert "not properly shut down" in pg.log_file.read_text()  # crash recovery ran
        assert _scalar(pg.dsn, "SELECT array_agg(x ORDER BY x)::text FROM t") == "{1}"
        assert _scalar(pg.dsn, "SELECT string_agg(gid, ',') FROM pg_prepared_xacts") == "survives"
        prepared.close()
        open_txn.close()


def test_close_removes_only_a_directory_it_created(tmp_path: Path) -> None:
    own = EmbeddedPostgres()
    own.start()
    base = own.data_dir.parent
    own.close()
    assert not base.exists()
    given = EmbeddedPostgres(tmp_path / "given")
    given.start()
    given.close()
    assert (tmp_path / "given" / "data" / "PG_VERSION").exists()


@pytest.mark.skipif(
    os.geteuid() != 0, reason="only root runs the server as another user, who needs search rights"
)
def test_a_restart_grants_search_rights_taken_away_since_the_first_start(tmp_path: Path) -> None:
    # As root the server runs as its own account, which must reach the data directory
    # through pytest's private directories; a new pytest session (another suite run beside
    # this one) sets /tmp/pytest-of-root back to 0700 at any time.
    pg = EmbeddedPostgres(tmp_path / "later")
    pg.start()
    pg.stop()
    tmp_path.chmod(0o700)
    try:
        pg.start()
        assert _scalar(pg.dsn, "SELECT 1") == 1
    finally:
        pg.close()


def test_port_before_start_and_bad_settings_are_refused(tmp_path: Path) -> None:
    pg = EmbeddedPostgres(tmp_path)
    with pytest.raises(EmbeddedPostgresError, match="start"):
        _ = pg.dsn
    with pytest.raises(ValueError, match="max_prepared_transactions"):
        EmbeddedPostgres(tmp_path, max_prepared_transactions=-1)
    with pytest.raises(ValueError, match="one-line"):
        EmbeddedPostgres(tmp_path, settings={"work_mem": "1MB\nfsync=off"})


def test_a_server_that_cannot_start_reports_its_log(tmp_path: Path) -> None:
    pg = EmbeddedPostgres(tmp_path, settings={"shared_buffers": "not-a-size"})
    with pytest.raises(EmbeddedPostgresError, match="shared_buffers"):
        pg.start()
    assert not pg.running
    pg.close()
