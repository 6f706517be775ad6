"""EmbeddedKafka: the broker on a background thread of this process."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import TracebackType

from ._broker import Broker
from ._config import BrokerConfig
from ._errors import BrokerStartError
from ._faults import Faults
from ._security import ListenerSecurity
from ._server import KafkaServer
from ._stats import RequestCounter

# Seconds to wait for the broker thread to start listening or to stop.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class EmbeddedKafka:
    """A minikafka broker running in a daemon thread; use as a context manager.

    Contract:
    1. ``start()`` (or ``with``) returns once the broker listens; ``bootstrap_servers``
       is then valid.
    2. ``restart()`` stops the broker and starts it again on the same port and data
       dir. With ``data_dir`` everything durable is reloaded; without it all state is
       lost, exactly as a real broker without disks would lose it.
    3. ``faults`` and the request counter stay the same objects across restarts.
    4. ``request_counts()`` may be called from any thread, running or not.
    5. ``security`` (default PLAINTEXT) secures the listener with TLS and/or SASL
       (docs/minikafka.md, "Security"); it stays the same across restarts.
    6. With ``config.nodes`` > 1 every node listens on a port of its own (``ports``;
       ``port`` is the first node's); ``bootstrap_servers`` lists them all and
       ``faults.stop_node()``, ``start_node()``, ``move_leader()`` and
       ``move_coordinator()`` fail nodes over (docs/minikafka.md, "Several nodes").
       ``restart()`` starts every node on its port again.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        data_dir: str | Path | None = None,
        config: BrokerConfig | None = None,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.host = host
        self.ports = [port]
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.config = config or BrokerConfig()
        self.security = security or ListenerSecurity()
        self.faults = Faults()
        self.requests = RequestCounter()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._server: KafkaServer | None = None

    @property
    def port(self) -> int:
        """The first node's port (0 before the first start when none was given)."""
        return self.ports[0]

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of every node, comma-separated, for client configs."""
        if self._server is None:
            msg = "EmbeddedKafka is not running; call start() or use it as a context manager"
            raise BrokerStartError(msg)
        return ",".join(f"{self.host}:{port}" for port in self.ports)

    @property
    def broker(self) -> Broker:
        """The broker state (for white-box tests; touch only from the broker thread)."""
        if self._server is None:
            msg = "EmbeddedKafka is not running"
            raise BrokerStartError(msg)
        return self._server.broker

    def request_counts(self, *, reset: bool = False) -> dict[str, int]:
        """Return the requests served so far by API name (``{"Produce": 12, "EndTxn": 1}``).

        Counts every decoded request (also those answered with an error or by a fault
        hook); frames refused before dispatch count as ``rejected``. Diff two snapshots
        to count the requests of one stretch of work; ``reset=True`` starts from zero.
        """
        counts = self.requests.snapshot()
        if reset:
            self.requests.reset()
        return counts

    def start(self) -> EmbeddedKafka:
        """Start the broker thread and wait until it listens."""
        if self._thread is not None:
            return self
        started = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._main(started))
            except BaseException as exc:  # noqa: BLE001 - reported to start()
                errors.append(exc)
                started.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="minikafka", daemon=True)
        self._thread.start()
        if not started.wait(START_TIMEOUT_S) or errors:
            self._thread = None
            self._server = None
            msg = f"minikafka did not start on {self.host} ports {self.ports}: {errors[:1]}"
            raise BrokerStartError(msg)
        return self

    async def _main(self, started: threading.Event) -> None:
        self._stop = asyncio.Event()
        broker = Broker(self.config, self.data_dir, requests=self.requests)
        server = KafkaServer(broker, self.faults, self.host, self.ports, self.security)
        await server.start()
        self.ports = server.ports
        self._server = server
        started.set()
        try:
            await self._stop.wait()
        finally:
            await server.stop()

    def stop(self) -> None:
        """Stop the broker and wait for its thread to end."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None or loop is None or stop is None:
            return
        loop.call_soon_threadsafe(stop.set)
        thread.join(STOP_TIMEOUT_S)
        self._thread = None
        self._server = None

    def restart(self) -> None:
        """Stop, then start again on the same port and data dir."""
        self.stop()
        self.start()

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
