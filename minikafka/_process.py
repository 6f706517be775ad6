"""BrokerProcess: ``python -m minikafka`` in a subprocess, for kill -9 style tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from ._control import Answer, NodeFaults, NodeOp, node_control
from ._errors import BrokerConfigError, BrokerStartError
from ._security import ListenerSecurity, write_users_file
from ._stats import request_counts

# Seconds to wait for the LISTENING line of a starting broker (busy CI machine).
START_TIMEOUT_S = 60.0
# Seconds to wait for a broker to exit after SIGTERM before SIGKILL.
TERMINATE_TIMEOUT_S = 15.0


class BrokerProcess(NodeFaults):
    """A minikafka broker in a child process (same interpreter).

    Contract:
    1. ``start()`` (or ``with``) returns after the child printed ``LISTENING``.
    2. ``kill()`` sends SIGKILL, ``terminate()`` SIGTERM (clean stop); both wait.
    3. ``restart()`` starts a new child on the same port and data dir (after kill or
       terminate, or stops the running one first with SIGTERM).
    4. The child's stderr log goes to ``log_path``.
    5. ``security`` secures the child's listener (the CLI's ``--security-protocol``,
       ``--sasl-*`` and ``--ssl-*`` flags); passwords reach the child in a file only
       its owner can read, never on its command line.
    6. ``nodes`` > 1 runs that many nodes (``--nodes``); ``bootstrap_servers`` lists them
       all, ``restart()`` starts every node on its port again. ``stop_node()``,
       ``start_node()``, ``move_leader()``, ``move_coordinator()`` and ``node_status()``
       reach the child through its control port (``control_address``).
    """

    def __init__(
        self,
        *,
        data_dir: str | Path | None = None,
        port: int = 0,
        extra_args: Sequence[str] = (),
        host: str = "127.0.0.1",
        security: ListenerSecurity | None = None,
        nodes: int = 1,
    ) -> None:
        if nodes < 1:
            msg = f"BrokerProcess(nodes={nodes}): a cluster needs at least one node"
            raise BrokerConfigError(msg)
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.ports = [port]
        self.nodes = nodes
        self.control_port = 0
        self.host = host
        self.extra_args = tuple(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None
        self._logdir = tempfile.mkdtemp(prefix="minikafka-log-")
        self.log_path = Path(self._logdir) / "broker.log"
        self.security = security or ListenerSecurity()

    @property
    def port(self) -> int:
        """The first node's port (0 before the first start when none was given)."""
        return self.ports[0]

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of every node of the (last) running broker, comma-separated."""
        if self.port == 0:
            msg = "BrokerProcess has not started yet"
            raise BrokerStartError(msg)
        return ",".join(f"{self.host}:{port}" for port in self.ports)

    @property
    def control_address(self) -> str:
        """``host:port`` of the child's control port (``python -m minikafka control``)."""
        if self.control_port == 0:
            msg = "BrokerProcess has not started yet"
            raise BrokerStartError(msg)
        return f"{self.host}:{self.control_port}"

    def _run_node_op(self, op: NodeOp) -> Answer:
        return node_control(self.control_address, op)

    @property
    def alive(self) -> bool:
        """Whether the child process is running."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The child's process id."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> BrokerProcess:
        """Spawn the broker and wait for its LISTENING line."""
        if self.alive:
            return self
        ports = ",".join(str(p) for p in self.ports)
        cmd = [sys.executable, "-m", "minikafka", "--host", self.host, "--port", ports]
        cmd += ["--nodes", str(self.nodes), "--control-port", str(self.control_port)]
        if self.data_dir is not None:
            cmd += ["--data-dir", str(self.data_dir)]
        cmd += self._security_args()
        cmd += list(self.extra_args)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env
            )
        finally:
            log.close()
        listening = self._read_line()
        control = self._read_line() if listening.startswith("LISTENING ") else ""
        if not (listening.startswith("LISTENING ") and control.startswith("CONTROL ")):
            self.kill()
            tail = self.log_path.read_text(errors="replace")[-2000:]
            msg = f"minikafka subprocess did not start (got {listening!r}); log tail:\n{tail}"
            raise BrokerStartError(msg)
        addresses = listening.removeprefix("LISTENING ").split(",")
        self.ports = [int(address.rsplit(":", 1)[1]) for address in addresses]
        self.control_port = int(control.rsplit(":", 1)[1])
        return self

    def _security_args(self) -> list[str]:
        sec = self.security
        args = ["--security-protocol", sec.protocol]
        if sec.uses_sasl:
            users_file = Path(self._logdir) / "users.properties"
            write_users_file(users_file, sec.users)
            args += ["--sasl-mechanisms", ",".join(sec.mechanisms)]
            args += ["--sasl-users-file", str(users_file)]
        files = [("--ssl-certfile", sec.certfile), ("--ssl-keyfile", sec.keyfile)]
        files.append(("--ssl-client-cafile", sec.client_cafile))
        for flag, path in files:
            if path is not None:
                args += [flag, path]
        if sec.scram_iterations != ListenerSecurity().scram_iterations:
            args += ["--scram-iterations", str(sec.scram_iterations)]
        return args

    def _read_line(self) -> str:
        assert self._proc is not None and self._proc.stdout is not None  # noqa: S101
        result: list[bytes] = []
        reader = threading.Thread(
            target=lambda: result.append(self._proc.stdout.readline()),  # type: ignore[union-attr]
            daemon=True,
        )
        reader.start()
        reader.join(START_TIMEOUT_S)
        return result[0].decode(errors="replace").strip() if result else ""

    def request_counts(self, *, reset: bool = False) -> dict[str, int]:
        """Return the requests the running broker served so far by API name (read over TCP).

        Same meaning as :meth:`minikafka.EmbeddedKafka.request_counts`; the counts start
        from zero in every new child process (``restart()`` included). The read-out is
        an unauthenticated plain-TCP request, so it needs a PLAINTEXT listener.
        """
        if self.security.protocol != "PLAINTEXT":
            msg = (
                "request_counts() over TCP needs a PLAINTEXT listener; this broker's is "
                f"{self.security.protocol} (use EmbeddedKafka.request_counts() in-process)"
            )
            raise BrokerConfigError(msg)
        return request_counts(self.bootstrap_servers, reset=reset)

    def kill(self) -> None:
        """SIGKILL the broker (no clean shutdown) and wait for it."""
        self._signal(signal.SIGKILL, TERMINATE_TIMEOUT_S)

    def terminate(self) -> None:
        """SIGTERM the broker (clean shutdown) and wait; SIGKILL if it hangs."""
        self._signal(signal.SIGTERM, TERMINATE_TIMEOUT_S)

    def _signal(self, sig: signal.Signals, timeout: float) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        if proc.stdout is not None:
            proc.stdout.close()

    def restart(self) -> None:
        """Start again on the same port and data dir (terminating a live one first)."""
        if self.alive:
            self.terminate()
        self._proc = None
        self.start()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.terminate()
