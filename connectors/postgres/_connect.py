"""Opening connections with the sink's session settings, and the driver's shared connection.

Every connection of the sink carries: ``connect_timeout``, TCP keepalives (a dead peer is
noticed in seconds), ``statement_timeout`` and ``lock_timeout`` (no statement waits
forever), and an ``application_name`` naming the sink and role (visible in
``pg_stat_activity``). Opening is retried on RETRY-class errors (a server restarting).
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from connectors.postgres._classify import call_with_retry
from connectors.postgres._config import (
    KEEPALIVES_COUNT,
    KEEPALIVES_IDLE_S,
    KEEPALIVES_INTERVAL_S,
    PostgresSinkConfig,
)

# application_name is truncated by the server at 63 bytes.
_APP_NAME_BYTES = 63

Conn = psycopg.Connection[tuple[Any, ...]]


def conninfo(cfg: PostgresSinkConfig, role: str) -> str:
    """Return the sink's connection string for ``role`` (the user's DSN plus the sink's settings)."""
    user_options = conninfo_to_dict(cfg.dsn).get("options")
    options = (
        f"-c statement_timeout={cfg.statement_timeout_ms} -c lock_timeout={cfg.lock_timeout_ms}"
    )
    if user_options:
        options = f"{user_options} {options}"
    app = f"eos {cfg.sink_id} {role}".encode()[:_APP_NAME_BYTES].decode(errors="ignore")
    return make_conninfo(
        cfg.dsn,
        connect_timeout=cfg.connect_timeout_s,
        keepalives=1,
        keepalives_idle=KEEPALIVES_IDLE_S,
        keepalives_interval=KEEPALIVES_INTERVAL_S,
        keepalives_count=KEEPALIVES_COUNT,
        options=options,
        application_name=app,
    )


def connect(cfg: PostgresSinkConfig, role: str, *, autocommit: bool) -> Conn:
    """Open a connection for ``role`` (retried while the server is unreachable or starting)."""
    info = conninfo(cfg, role)
    return call_with_retry(
        f"connecting to PostgreSQL for sink {cfg.sink_id!r} ({role})",
        lambda: psycopg.connect(info, autocommit=autocommit),
    )


class DriverConnection:
    """One autocommit connection of the driver, reopened after it broke.

    The coordinator finishes prepared transactions one partition at a time; reusing one
    connection saves a connection set-up per partition. Contract: ``get()`` returns an
    open connection (a new one if the last one is closed or broken); ``discard()`` drops
    it after an error so the next ``get()`` reconnects. Thread-safe; not picklable (kept
    on the driver in a module-level cache, never shipped to tasks).
    """

    def __init__(self, cfg: PostgresSinkConfig) -> None:
        self._cfg = cfg
        self._conn: Conn | None = None
        # Reentrant, like _DRIVER_LOCK: a sink collected while this thread holds it (the
        # collector runs at any allocation) releases its connection from its finalizer.
        self._lock = threading.RLock()

    def get(self) -> Conn:
        """Return an open autocommit connection."""
        with self._lock:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                conn = self._conn = connect(self._cfg, "coordinator", autocommit=True)
            return conn

    def discard(self) -> None:
        """Close and forget the connection (after an error)."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


_DRIVER: dict[str, DriverConnection] = {}
# Reentrant: a sink object collected while this thread holds it (the collector runs at any
# allocation) calls release_driver_connection from its finalizer, in the same thread.
_DRIVER_LOCK = threading.RLock()


def release_driver_connection(cfg: PostgresSinkConfig) -> None:
    """Close and forget the driver connection of the sink's DSN and settings (its sink closed)."""
    with _DRIVER_LOCK:
        found = _DRIVER.pop(conninfo(cfg, "coordinator"), None)
    if found is not None:
        found.discard()


def driver_connection(cfg: PostgresSinkConfig) -> DriverConnection:
    """Return the process-wide driver connection of the sink's DSN and settings."""
    key = conninfo(cfg, "coordinator")
    with _DRIVER_LOCK:
        found = _DRIVER.get(key)
        if found is None:
            found = _DRIVER[key] = DriverConnection(cfg)
        return found
