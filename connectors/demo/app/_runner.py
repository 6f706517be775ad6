"""Run the streaming query as a separate Spark application and follow its epochs.

Contract:

1. :meth:`AppProcess.start` writes the config to a file and starts
   ``python -m connectors.demo.app`` in a new session (its own process group), with stderr
   going to a log file so a full pipe can never block it;
2. a reader thread parses ``EPOCH`` lines from stdout into :attr:`AppProcess.epochs`;
3. :meth:`wait` returns the exit code (negative: killed by that signal);
4. :meth:`kill` sends SIGKILL to the app's process group (driver, JVM, Python workers):
   the "whole application killed" fault; :meth:`terminate` sends SIGTERM to the driver,
   which stops the query gracefully (``KafkaSink.stop_gracefully``) and exits 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from connectors.demo.app._config import EpochLine, PipelineConfig
from connectors.ops._properties import environment_variables
from connectors.testing.faults import KILL_APP_ENV

# Seconds an app run may take before the runner gives up on it (busy 2-core machine).
APP_TIMEOUT_S = 600.0
# Seconds between checks while waiting for a condition on the app's epochs.
POLL_INTERVAL_S = 0.2


class AppProcess:
    """One subprocess run of the streaming query (see the module contract)."""

    def __init__(
        self,
        cfg: PipelineConfig,
        workdir: str | Path,
        name: str = "app",
        *,
        allow_kill_app: bool = False,
    ) -> None:
        """Describe one run; nothing starts before :meth:`start`.

        ``allow_kill_app``: let the app's fault plan use ``kill_app`` (the app runs in a
        session of its own, so the whole-application SIGKILL cannot reach the caller).
        """
        self.cfg = cfg
        self.allow_kill_app = allow_kill_app
        self.workdir = Path(workdir)
        self.name = name
        self.epochs: list[EpochLine] = []
        self.stderr_path = self.workdir / f"{name}.stderr.log"
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._on_epoch: Callable[[EpochLine], None] | None = None
        self.done = False

    def start(self, on_epoch: Callable[[EpochLine], None] | None = None) -> AppProcess:
        """Start the app (step 1) and its stdout reader (step 2)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config_path = self.workdir / f"{self.name}.json"
        config_path.write_text(self.cfg.to_json())
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if self.allow_kill_app:
            env[KILL_APP_ENV] = "1"
        env.update(environment_variables(self.cfg.client_config))  # never in the config file
        self._on_epoch = on_epoch
        with self.stderr_path.open("w") as err:
            self._proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [sys.executable, "-m", "connectors.demo.app", str(config_path)],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None  # noqa: S101
        for line in self._proc.stdout:
            parsed = EpochLine.parse(line.strip())
            if parsed is not None:
                self.epochs.append(parsed)
                if self._on_epoch is not None:
                    self._on_epoch(parsed)
            elif line.strip() == "DONE":
                self.done = True

    def wait(self, timeout_s: float = APP_TIMEOUT_S) -> int:
        """Wait for the app to exit and return its exit code (step 3)."""
        assert self._proc is not None  # noqa: S101
        try:
            code = self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._reap_group()
        if self._reader is not None:
            self._reader.join(timeout=10)
        return code

    def _reap_group(self) -> None:
        # The JVM exits when the driver's pipe closes; SIGKILL whatever is left of the group.
        assert self._proc is not None  # noqa: S101
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def wait_for(self, condition: Callable[[AppProcess], bool], timeout_s: float) -> bool:
        """Wait until ``condition(self)`` holds or the app exits; return whether it held."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition(self):
                return True
            if self._proc is not None and self._proc.poll() is not None:
                return condition(self)
            time.sleep(POLL_INTERVAL_S)
        return False

    def kill(self) -> None:
        """SIGKILL the app's whole process group (step 4)."""
        if self._proc is None or self._proc.poll() is not None:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self._proc.wait(timeout=60)

    def terminate(self) -> None:
        """Send SIGTERM to the app's driver: it stops gracefully (after the epoch in flight)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)

    def failure_summary(self) -> str:
        """Return the last exception lines of the app's stderr ('' if none)."""
        if not self.stderr_path.exists():
            return ""
        found: list[str] = []
        for line in self.stderr_path.read_text(errors="replace").splitlines():
            text = line.strip()
            head = text.split(":", 1)[0]
            if (head.endswith(("Error", "Exception", "Fault")) and " " not in head) or (
                "Job aborted due to stage failure" in text
            ):
                found.append(text[:400])
        return "\n".join(dict.fromkeys(found[-6:]))

    def short_failure(self) -> str:
        """Return one line saying why the app failed, for progress displays ('' if unknown)."""
        lines = self.failure_summary().splitlines()
        for line in lines:
            if "Job aborted due to stage failure:" in line:
                return line.split("Job aborted due to stage failure:", 1)[1].strip()[:160]
        return lines[-1][:160] if lines else ""

    def stderr_tail(self, lines: int = 40) -> str:
        """Return the last ``lines`` lines of the app's stderr, for failure messages."""
        if not self.stderr_path.exists():
            return ""
        return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
