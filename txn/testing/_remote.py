"""A :class:`~txn.testing.MemoryStore` served to other processes (Spark's Python workers).

:func:`serve_store` runs a ``multiprocessing`` manager on loopback that owns one store;
:class:`RemoteStore` is a picklable handle (address and key only) that connects lazily
in whichever process uses it and forwards the store's methods. Exceptions raised by the
store (a fenced instance, an injected write failure) are re-raised in the caller.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.managers import BaseManager
from typing import Any

from txn.testing._store import MemoryStore

_TYPEID = "store"
# Seconds between checks that the serving thread has started (it starts at once).
STARTUP_POLL_S = 0.01


class _Manager(BaseManager):
    """Serves the store registered under ``_TYPEID``."""


@contextmanager
def serve_store(store: MemoryStore | None = None) -> Iterator[tuple[MemoryStore, RemoteStore]]:
    """Serve ``store`` (a new one if None) on loopback; yield it and a handle on it.

    The store itself stays in this process (assert on it directly); the handle travels.
    """
    served = store if store is not None else MemoryStore()
    authkey = secrets.token_bytes(16)

    class Manager(_Manager):
        pass

    Manager.register(_TYPEID, callable=lambda: served)
    manager = Manager(address=("127.0.0.1", 0), authkey=authkey)
    server: Any = manager.get_server()
    thread = threading.Thread(target=_serve, args=(server,), name="memory-store", daemon=True)
    thread.start()
    while not hasattr(server, "stop_event"):  # set first thing by serve_forever
        time.sleep(STARTUP_POLL_S)
    host, port = server.address
    try:
        yield served, RemoteStore(str(host), int(port), authkey)
    finally:
        server.stop_event.set()  # serve_forever returns at its next wake-up
        server.listener.close()


def _serve(server: Any) -> None:
    with contextlib.suppress(SystemExit):  # serve_forever ends with sys.exit(0)
        server.serve_forever()


class RemoteStore:
    """Picklable handle on a served store; connects on first use in each process."""

    def __init__(self, host: str, port: int, authkey: bytes) -> None:
        self._address = (host, port)
        self._authkey = authkey
        self._proxy: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_address": self._address, "_authkey": self._authkey, "_proxy": None}

    def _store(self) -> Any:
        if self._proxy is None:
            _Manager.register(_TYPEID)
            manager = _Manager(address=self._address, authkey=self._authkey)
            manager.connect()
            self._proxy = getattr(manager, _TYPEID)()
        return self._proxy

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._store(), name)
