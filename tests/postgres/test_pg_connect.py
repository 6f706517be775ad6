"""The driver's shared connection cache can be released from a sink's finalizer.

A sink object's finalizer (``weakref.finalize``, run by the garbage collector at any
allocation) closes its driver connection. The collector may run while the same thread
holds the cache's lock or the connection's, e.g. while it creates the cache entry; the
release must then not wait for itself. No server is needed: nothing is connected.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from connectors.postgres import PostgresSinkConfig, _connect

# Seconds a release may take before the test calls it a deadlock (it takes microseconds).
RELEASE_TIMEOUT_S = 10.0


def _config() -> PostgresSinkConfig:
    return PostgresSinkConfig.build(
        dsn="host=127.0.0.1 port=1 dbname=nowhere", table="t", sink_id="finalized"
    )


def _returns(fn: Callable[[], None]) -> bool:
    """Whether ``fn`` returns within RELEASE_TIMEOUT_S (run in a daemon thread)."""
    done = threading.Event()

    def run() -> None:
        fn()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(RELEASE_TIMEOUT_S)


def test_a_release_while_the_thread_holds_the_cache_lock_returns() -> None:
    cfg = _config()
    _connect.driver_connection(cfg)

    def collected_inside_the_cache() -> None:
        with _connect._DRIVER_LOCK:
            _connect.release_driver_connection(cfg)

    assert _returns(collected_inside_the_cache)
    assert _connect.conninfo(cfg, "coordinator") not in _connect._DRIVER


def test_a_discard_while_the_thread_holds_the_connection_lock_returns() -> None:
    shared = _connect.DriverConnection(_config())

    def collected_inside_get() -> None:
        with shared._lock:
            shared.discard()

    assert _returns(collected_inside_get)
